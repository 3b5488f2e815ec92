#!/usr/bin/env python3
"""Small random Hugging Face models and their logits, the fixtures dtr's HF import
and export tests compare against (tests/fixtures/hf/).

Needs torch and transformers (pip install torch transformers), which the test
suite itself never does. Run from the repository root:

  python3 scripts/hf_fixtures.py                 # rewrites tests/fixtures/hf/
  python3 scripts/hf_fixtures.py --check NAME=DIR...
      # loads each dtr-exported directory DIR with transformers and compares its
      # logits with those of fixture NAME

Each fixture is a directory written by save_pretrained (config.json and
model.safetensors, or model-0000N-of-0000M.safetensors with their index) plus
logits.json: the token ids it was run on and the f32 logits transformers computes
for them. The models are seeded, so a rerun with the same torch and transformers
writes the same files.
"""
import argparse
import json
import pathlib
import sys

import torch
import transformers

ROOT = pathlib.Path("tests/fixtures/hf")

# name -> (architecture, config keywords, save_pretrained keywords)
FIXTURES = {
    # GPT-2 with its usual tied head; odd vocabulary and width.
    "gpt2_tied": ("gpt2", dict(vocab_size=61, n_embd=24, n_layer=2, n_head=3, n_positions=16), {}),
    # Llama with grouped-query heads (4 query heads share 2 key/value heads) and an untied head.
    "llama_gqa": ("llama", dict(vocab_size=53, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
                                rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False), {}),
    # Llama with a tied head, saved as sharded files with an index.
    "llama_tied_sharded": ("llama", dict(vocab_size=47, hidden_size=24, intermediate_size=36, num_hidden_layers=3,
                                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16,
                                         rms_norm_eps=1e-6, rope_theta=500.0, tie_word_embeddings=True),
                           dict(max_shard_size="20KB")),
    # A byte-level Llama (vocabulary 256) that dtr-train --init-from fine-tunes on bytes.
    "llama_bytes": ("llama", dict(vocab_size=256, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                  num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                                  tie_word_embeddings=True), {}),
}

TOKENS = [[1, 5, 9, 2, 7, 3, 8, 4], [0, 11, 6, 10, 12, 13, 2, 1]]


def build(arch, config_kwargs):
    if arch == "gpt2":
        config = transformers.GPT2Config(**config_kwargs, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                         bos_token_id=0, eos_token_id=0)
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.LlamaConfig(**config_kwargs, attention_dropout=0.0)
        model = transformers.LlamaForCausalLM(config)
    # Larger than the default init (std 0.02), so that every weight moves the logits.
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model.eval()


def logits_of(model):
    with torch.no_grad():
        return model(torch.tensor(TOKENS)).logits.float()


def write_fixtures():
    for name, (arch, config_kwargs, save_kwargs) in FIXTURES.items():
        torch.manual_seed(1234)
        model = build(arch, config_kwargs)
        out = ROOT / name
        for old in out.glob("*"):
            old.unlink()
        model.save_pretrained(out, safe_serialization=True, **save_kwargs)
        (out / "generation_config.json").unlink(missing_ok=True)
        logits = logits_of(model)
        (out / "logits.json").write_text(json.dumps({
            "tokens": TOKENS,
            "shape": list(logits.shape),
            "logits": [float(v) for v in logits.flatten()],
            "made_with": {"torch": torch.__version__, "transformers": transformers.__version__},
        }) + "\n")
        print(f"{out}: {sorted(p.name for p in out.iterdir())}")


def check(pairs):
    failed = False
    for pair in pairs:
        name, _, d = pair.partition("=")
        d = pathlib.Path(d)
        config = json.loads((d / "config.json").read_text())
        cls = transformers.GPT2LMHeadModel if config["model_type"] == "gpt2" else transformers.LlamaForCausalLM
        model = cls.from_pretrained(d).eval()
        fixture = json.loads((ROOT / name / "logits.json").read_text())
        want = torch.tensor(fixture["logits"]).view(fixture["shape"])
        got = logits_of(model)
        error = ((got - want).abs().max() / want.abs().max()).item()
        ok = error <= 1e-5
        failed |= not ok
        print(f"{d}: transformers loads it; logits differ from {name}'s by {error:.2e} "
              f"relative to the largest: {'ok' if ok else 'FAIL'}")
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", nargs="+", metavar="NAME=DIR",
                        help="a dtr-exported directory and the fixture it was made from")
    args = parser.parse_args()
    if args.check:
        return check(args.check)
    write_fixtures()
    return 0


if __name__ == "__main__":
    sys.exit(main())
