#!/usr/bin/env python3
# PyTorch yardstick for bench/gpu_train_step_bench.cpp: one training step of the
# GPT-2 124M shape of dtr's nn::TransformerConfig::gpt2_124m() in plain PyTorch on
# one GPU, printing ms/step, tokens/s, TFLOP/s and MFU with the same FLOP formula,
# so the two outputs can be read side by side. PyTorch exists only on the GPU
# machine: this script is run there by scripts/device_bench.sh and is imported by
# nothing in the project.
#
# The model mirrors dtr/nn/transformer.{h,cpp} (style gpt2): token embedding 50257 x 768
# plus learned position embedding 1024 x 768; 12 pre-norm blocks
#   h = x + wo(sdpa_causal(wq(ln1(x)), wk(ln1(x)), wv(ln1(x))))
#   y = h + down(gelu_tanh(up(ln2(h))))
# with LayerNorm (weight and bias, eps 1e-5), separate q/k/v/o Linear layers with
# biases, F.scaled_dot_product_attention(is_causal=True), MLP 768 -> 3072 -> 768;
# final LayerNorm; output head tied to the token embedding (no bias); dropout 0.
# Init as dtr: weights normal(0, 0.02), biases 0, wo and down normal(0, 0.02 /
# sqrt(2 * 12)), norms 1 / 0. Loss: cross entropy on random tokens.
# Optimizer: torch.optim.AdamW(fused=True), lr 3e-4, betas (0.9, 0.95), eps 1e-8,
# weight decay 0.1 on every parameter (as dtr's AdamW).
#
# Differences from dtr, stated:
#  - --mode autocast (default): f32 parameters, forward under
#    torch.autocast(bfloat16). Autocast runs the matmuls and attention in bf16 but
#    LayerNorm, the residual stream, the embeddings and the loss in f32, whereas
#    dtr's FSDP mixed precision casts every parameter to bf16 and computes the whole
#    forward in bf16 (f32 inside the kernels' accumulators). --mode fsdp2 is the
#    closest match: torch.distributed.fsdp.fully_shard per block then the root at
#    world size 1 (NCCL), MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=f32),
#    logits cast to f32 for the loss.
#  - PyTorch's cross entropy materialises f32 log-probabilities for the whole vocab;
#    dtr's fused kernel does not.
#  - The vocab is 50257 as in dtr (nanoGPT pads it to 50304 for speed); q/k/v are
#    three GEMMs as in dtr (nanoGPT fuses them into one).
#  - No torch.compile unless --compile.
#
# FLOPs per token = 6 * N + 12 * L * T * d, N = parameters less the position table
# (the tied embedding counted once, as the output head's matmul); MFU against
# --peak-tflops (default 989, H100 SXM dense bf16). Timing: --warmup untimed steps,
# then --steps steps back to back between two torch.cuda.synchronize(); ms/step is
# their mean.
#
#   python3 bench/torch_gpt2_step.py [--batch 8] [--seq 1024] [--steps 10] [--warmup 3]
#       [--mode autocast|fsdp2] [--compile] [--peak-tflops 989] [--clip-grad-norm 0]
import argparse
import math
import os
import time


def build_model(torch, vocab, dim, n_layers, n_heads, max_seq_len, eps=1e-5):
    nn = torch.nn
    F = torch.nn.functional
    init_std = 0.02
    residual_std = init_std / math.sqrt(2.0 * n_layers)

    def linear(fan_in, fan_out, std):
        layer = nn.Linear(fan_in, fan_out, bias=True)
        nn.init.normal_(layer.weight, 0.0, std)
        nn.init.zeros_(layer.bias)
        return layer

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.wq = linear(dim, dim, init_std)
            self.wk = linear(dim, dim, init_std)
            self.wv = linear(dim, dim, init_std)
            self.wo = linear(dim, dim, residual_std)

        def forward(self, x):
            b, t, _ = x.shape
            hd = dim // n_heads
            q = self.wq(x).view(b, t, n_heads, hd).transpose(1, 2)
            k = self.wk(x).view(b, t, n_heads, hd).transpose(1, 2)
            v = self.wv(x).view(b, t, n_heads, hd).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.wo(y.transpose(1, 2).reshape(b, t, dim))

    class FeedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = linear(dim, 4 * dim, init_std)
            self.down = linear(4 * dim, dim, residual_std)

        def forward(self, x):
            return self.down(F.gelu(self.up(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm = nn.LayerNorm(dim, eps=eps)
            self.attn = Attention()
            self.ffn_norm = nn.LayerNorm(dim, eps=eps)
            self.ffn = FeedForward()

        def forward(self, x):
            h = x + self.attn(self.attn_norm(x))
            return h + self.ffn(self.ffn_norm(h))

    class GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_embeddings = nn.Embedding(vocab, dim)
            self.pos_embeddings = nn.Embedding(max_seq_len, dim)
            nn.init.normal_(self.tok_embeddings.weight, 0.0, init_std)
            nn.init.normal_(self.pos_embeddings.weight, 0.0, init_std)
            self.layers = nn.ModuleList([Block() for _ in range(n_layers)])
            self.norm = nn.LayerNorm(dim, eps=eps)

        def forward(self, tokens):
            positions = torch.arange(tokens.shape[1], device=tokens.device)
            h = self.tok_embeddings(tokens) + self.pos_embeddings(positions)
            for layer in self.layers:
                h = layer(h)
            h = self.norm(h)
            return F.linear(h, self.tok_embeddings.weight)  # tied head

    return GPT2()


def import_fully_shard():
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # torch >= 2.6
    except ImportError:
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard  # torch 2.4, 2.5
    return fully_shard, MixedPrecisionPolicy


def main():
    parser = argparse.ArgumentParser(description="GPT-2 124M training step in PyTorch (yardstick for "
                                                 "dtr_gpu_train_step_bench)")
    parser.add_argument("--batch", type=int, default=8, help="sequences per step")
    parser.add_argument("--seq", type=int, default=1024, help="sequence length")
    parser.add_argument("--warmup", type=int, default=3, help="untimed warm-up steps")
    parser.add_argument("--steps", type=int, default=10, help="timed steps (mean reported)")
    parser.add_argument("--mode", choices=["autocast", "fsdp2"], default="autocast",
                        help="autocast: f32 params + bf16 autocast; fsdp2: fully_shard at world size 1, "
                             "bf16 params / f32 reduce")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="peak dense TFLOP/s for MFU")
    parser.add_argument("--clip-grad-norm", type=float, default=0.0, help="clip the grad norm to this (0: off)")
    args = parser.parse_args()
    if args.batch < 1 or args.seq < 1 or args.steps < 1 or args.warmup < 0:
        parser.error("--batch, --seq and --steps must be >= 1, --warmup >= 0")

    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        raise SystemExit("torch_gpt2_step.py: no CUDA device visible to PyTorch")
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    vocab, dim, n_layers, n_heads = 50257, 768, 12, 12
    max_seq_len = max(1024, args.seq)
    torch.manual_seed(0)
    model = build_model(torch, vocab, dim, n_layers, n_heads, max_seq_len).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    n_matmul_params = n_params - model.pos_embeddings.weight.numel()

    if args.mode == "fsdp2":
        import torch.distributed as dist

        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29517")
        dist.init_process_group("nccl", rank=0, world_size=1)
        fully_shard, MixedPrecisionPolicy = import_fully_shard()
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model.layers:
            fully_shard(layer, mp_policy=mp)
        fully_shard(model, mp_policy=mp)

    def make_optimizer(fused):
        kind = {"fused": True} if fused else {"foreach": True}
        return torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                                 **kind)

    # fused=True can be refused at construction or at the first step (e.g. an older
    # torch without fused DTensor support): fall back to foreach and say so.
    opt = {"optimizer": None, "name": "AdamW(fused=True)", "checked": False}
    try:
        opt["optimizer"] = make_optimizer(True)
    except (RuntimeError, TypeError, ValueError) as e:
        opt.update(optimizer=make_optimizer(False), name=f"AdamW(foreach=True) (fused refused: {e})", checked=True)

    forward = torch.compile(model) if args.compile else model
    gen = torch.Generator(device=device)
    gen.manual_seed(1234)
    tokens = torch.randint(0, vocab, (args.batch, args.seq + 1), device=device, generator=gen)
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def optimizer_step():
        if opt["checked"]:
            opt["optimizer"].step()
            return
        opt["checked"] = True
        try:
            opt["optimizer"].step()
        except (RuntimeError, TypeError, ValueError) as e:
            opt.update(optimizer=make_optimizer(False), name=f"AdamW(foreach=True) (fused refused: {e})")
            opt["optimizer"].step()
            print(f"note: {opt['name']}", flush=True)

    def step():
        if args.mode == "autocast":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = forward(inputs)
                loss = F.cross_entropy(logits.view(-1, vocab), targets.view(-1))  # f32 under autocast
        else:
            logits = forward(inputs)
            loss = F.cross_entropy(logits.view(-1, vocab).float(), targets.view(-1))
        opt["optimizer"].zero_grad(set_to_none=True)
        loss.backward()
        if args.clip_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
        optimizer_step()
        return loss

    print(f"PyTorch {torch.__version__} GPT-2 124M step on {torch.cuda.get_device_name(device)}: "
          f"N = {n_params} ({n_matmul_params} without the position table), B={args.batch} T={args.seq}")
    print(f"mode {args.mode}, {opt['name']}, compile {args.compile}"
          + (f", clip grad norm {args.clip_grad_norm}" if args.clip_grad_norm > 0 else "")
          + f"; {args.warmup} warm-up + {args.steps} timed steps", flush=True)

    first_loss = float("nan")
    for i in range(args.warmup):
        loss = step()
        if i == 0:
            first_loss = loss.item()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    torch.cuda.synchronize()
    step_s = (time.perf_counter() - t0) / args.steps
    last_loss = loss.item()

    tokens_per_step = args.batch * args.seq
    flops_per_token = 6 * n_matmul_params + 12 * n_layers * args.seq * dim
    tflops = flops_per_token * tokens_per_step / step_s / 1e12
    print(f"\nloss: {first_loss:.4f} (first warm-up step) -> {last_loss:.4f} (last timed step); "
          f"ln(vocab) = {math.log(vocab):.4f}")
    print(f"FLOPs/token = 6*N + 12*L*T*d = 6*{n_matmul_params} + 12*{n_layers}*{args.seq}*{dim} "
          f"= {flops_per_token:.4e}")
    print(f"\n{'ms/step':>10} {'tokens/s':>12} {'TFLOP/s':>10} {'MFU':>8}")
    print(f"{1e3 * step_s:>10.2f} {tokens_per_step / step_s:>12.0f} {tflops:>10.1f} "
          f"{100 * tflops / args.peak_tflops:>7.1f}%")
    print(f"(MFU against {args.peak_tflops} TFLOP/s)")
    mib = 1 << 20
    print(f"\nCUDA memory: peak allocated {torch.cuda.max_memory_allocated() / mib:.1f} MiB, "
          f"peak reserved {torch.cuda.max_memory_reserved() / mib:.1f} MiB (over the timed steps)")

    if args.mode == "fsdp2":
        import torch.distributed as dist

        dist.destroy_process_group()


if __name__ == "__main__":
    main()
