#!/usr/bin/env python3
"""PyTorch CPU yardsticks for dtr's CPU benchmarks (f32 throughout).

  gemm   torch.mm of two 1024 x 1024 f32 matrices, GFLOP/s (best of >= 5 after a
         warm-up), as dtr_gemm_bench's 1024^3 row.
  gemm-shapes
         torch.mm on the rows of dtr_gemm_bench's shapes table (every transpose
         of 1024^3, the GPT-2 124M step's and a Llama MLP's layer shapes): one
         line per row, "yardstick gemm-shapes <name> <m>x<n>x<k> <op>: <GFLOP/s>".
  step   one training step of the GPT-2 124M shape, B=4 T=64, AdamW (lr 1e-4,
         PyTorch's default foreach path), ms (best of --steps after one warm-up),
         as dtr_train_step_bench: same model (bench/torch_gpt2_step.py's
         build_model, which mirrors nn::Transformer's gpt2 style), same init
         (normal 0.02), random tokens.
  fsdp   the FSDP step of dtr_fsdp_step_bench's default shape (6 layers x 384,
         6 heads, vocab 8192, seq 64, global batch 8) under FSDP2
         (torch.distributed.fsdp.fully_shard on every block, then the root) over
         gloo, each rank on its slice of the batch and max(1, cores / ranks)
         threads; ms/step is the median over --steps of the slowest rank (each
         step after a barrier). Run it under torchrun, or as
         `python -m torch.distributed.run --nproc-per-node N`.

Prints one line per figure, "yardstick <name>: <value> <unit>", for
bench/cpu_vs_torch.py to read. Needs torch; imported by nothing in the project.

  torch_cpu_yardstick.py gemm|step|fsdp [--threads N] [--steps S]
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt2_step import build_model  # noqa: E402


# dtr_gemm_bench's shapes table (bench/gemm_bench.cpp): name, m, n, k, op. "NT" is
# A as stored, B transposed (x . W^T), and so on.
GEMM_SHAPES = [
    ("square", 1024, 1024, 1024, "NN"),
    ("square", 1024, 1024, 1024, "NT"),
    ("square", 1024, 1024, 1024, "TN"),
    ("square", 1024, 1024, 1024, "TT"),
    ("gpt2 qkv forward", 256, 2304, 768, "NT"),
    ("gpt2 qkv input grad", 256, 768, 2304, "NN"),
    ("gpt2 qkv weight grad", 2304, 768, 256, "TN"),
    ("gpt2 mlp up forward", 256, 3072, 768, "NT"),
    ("gpt2 mlp down forward", 256, 768, 3072, "NT"),
    ("gpt2 mlp down weight grad", 768, 3072, 256, "TN"),
    ("gpt2 lm head forward", 256, 50257, 768, "NT"),
    ("gpt2 lm head input grad", 256, 768, 50257, "NN"),
    ("gpt2 lm head weight grad", 50257, 768, 256, "TN"),
    ("llama mlp up forward", 512, 5632, 2048, "NT"),
    ("llama mlp down input grad", 512, 5632, 2048, "NN"),
]


def best_gflops(multiply, flops):
    """multiply()'s best rate over >= 5 runs and >= 2 s, after a warm-up."""
    multiply()
    best, total, reps = float("inf"), 0.0, 0
    while reps < 5 or total < 2.0:
        t0 = time.perf_counter()
        multiply()
        dt = time.perf_counter() - t0
        best, total, reps = min(best, dt), total + dt, reps + 1
    return flops / best / 1e9


def gemm(args):
    # A new result tensor each time, as dtr::matmul in dtr_gemm_bench's square rows.
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    print(f"yardstick gemm: {best_gflops(lambda: torch.mm(a, b), 2 * 1024 ** 3):.1f} GFLOP/s")


def gemm_shapes(args):
    for name, m, n, k, op in GEMM_SHAPES:
        # op(X) is a transposed view of a stored matrix, as dtr reads it.
        a = torch.randn(k, m).t() if op[0] == "T" else torch.randn(m, k)
        b = torch.randn(n, k).t() if op[1] == "T" else torch.randn(k, n)
        out = torch.empty(m, n)  # into one result, as kernels::cpu::gemm in the shapes table
        rate = best_gflops(lambda: torch.mm(a, b, out=out), 2 * m * n * k)
        print(f"yardstick gemm-shapes {name} {m}x{n}x{k} {op}: {rate:.1f} GFLOP/s")


def step_fn(model, optimizer, inputs, targets, vocab):
    def step():
        logits = model(inputs)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return step


def random_batch(batch, seq, vocab, generator):
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=generator)
    return tokens[:, :seq].contiguous(), tokens[:, 1:].contiguous()


def gpt2_step(args):
    torch.manual_seed(0)
    vocab, batch, seq = 50257, 4, 64
    model = build_model(torch, vocab, 768, 12, 12, 1024)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    inputs, targets = random_batch(batch, seq, vocab, torch.Generator().manual_seed(0))
    step = step_fn(model, optimizer, inputs, targets, vocab)
    step()  # warm-up: allocates AdamW's state
    best = float("inf")
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t0)
    print(f"yardstick step: {1000 * best:.1f} ms")


def fsdp_step(args):
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    vocab, layers, dim, heads, seq, batch = 8192, 6, 384, 6, 64, 8
    torch.manual_seed(0)
    model = build_model(torch, vocab, dim, layers, heads, seq)
    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    inputs, targets = random_batch(batch, seq, vocab, torch.Generator().manual_seed(1234))
    local = batch // world
    rows = slice(rank * local, (rank + 1) * local)
    step = step_fn(model, optimizer, inputs[rows], targets[rows], vocab)
    for _ in range(2):
        step()
    times = []
    for _ in range(args.steps):
        dist.barrier()
        t0 = time.perf_counter()
        step()
        slowest = torch.tensor([time.perf_counter() - t0])
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        times.append(slowest.item())
    if rank == 0:
        print(f"yardstick fsdp: {1000 * statistics.median(times):.1f} ms ({world} ranks)", flush=True)
    # Every rank past its last collective before gloo tears down: without it, torch
    # 2.15's gloo aborts a rank now and then at exit ("terminate called without an
    # active exception").
    dist.barrier()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["gemm", "gemm-shapes", "step", "fsdp"])
    parser.add_argument("--threads", type=int, default=0,
                        help="intra-op threads (0: all cores; fsdp: cores / ranks)")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    threads = args.threads
    if threads == 0:
        ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        threads = max(1, (os.cpu_count() or 1) // ranks)
    torch.set_num_threads(threads)
    {"gemm": gemm, "gemm-shapes": gemm_shapes, "step": gpt2_step, "fsdp": fsdp_step}[args.what](args)


if __name__ == "__main__":
    main()
