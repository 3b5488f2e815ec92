#!/usr/bin/env python3
# PyTorch yardstick for dtr's attention bench (bench/attention_bench.cpp): forward and
# forward + backward TFLOP/s of torch.nn.functional.scaled_dot_product_attention,
# causal, bf16, on the same two shapes:
#   B 4, H 12, T 1024, D 64             (a GPT-2-small layer)
#   B 1, Hq 32, Hkv 8, T 2048, D 128    (a GQA layer: enable_gqa=True where torch has
#                                        it, else k/v expanded to 32 heads beforehand)
# once with PyTorch's default backend choice and once per backend that accepts the
# shape (flash, cuDNN, memory-efficient), via torch.nn.attention.sdpa_kernel.
# FLOPs as FlashAttention counts them (and as attention_bench.cpp): forward
# 4 * B * Hq * T * T * D / 2 (causal), backward 2.5x the forward, so fwd+bwd is
# 3.5x. Times: the median of --runs runs after --warmup, each timed with CUDA events.
# The fwd+bwd run calls torch.autograd.grad(out, (q, k, v), dout) (no accumulation
# into .grad). With expanded k/v the gradient reduction over the group is not timed.
# PyTorch exists only on the GPU machine; scripts/device_bench.sh runs this there.
#
#   python3 bench/torch_sdpa_bench.py [--warmup 3] [--runs 15]
import argparse


def main():
    parser = argparse.ArgumentParser(description="causal bf16 SDPA TFLOP/s (yardstick for dtr_attention_bench)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    if args.runs < 1 or args.warmup < 0:
        parser.error("--runs must be >= 1 and --warmup >= 0")

    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        raise SystemExit("torch_sdpa_bench.py: no CUDA device visible to PyTorch")
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    # enable_gqa arrived in torch 2.5: probe it with a tiny call.
    try:
        tiny_q = torch.zeros(1, 2, 4, 8, device=device, dtype=torch.bfloat16)
        tiny_kv = torch.zeros(1, 1, 4, 8, device=device, dtype=torch.bfloat16)
        F.scaled_dot_product_attention(tiny_q, tiny_kv, tiny_kv, is_causal=True, enable_gqa=True)
        has_gqa = True
    except (TypeError, RuntimeError):
        has_gqa = False

    backends = [("default", None)]
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"):
            if hasattr(SDPBackend, name):
                backends.append((name.lower().replace("_attention", ""), getattr(SDPBackend, name)))
    except ImportError:  # torch < 2.3: default backend only
        sdpa_kernel = None

    def median_ms(fn):
        for _ in range(args.warmup):
            fn()
        times = []
        for _ in range(args.runs):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        times.sort()
        return times[len(times) // 2]

    print(f"PyTorch {torch.__version__} scaled_dot_product_attention on {torch.cuda.get_device_name(device)}, "
          f"causal bf16; GQA {'via enable_gqa=True' if has_gqa else 'by expanding k/v'}")
    gen = torch.Generator(device=device)
    gen.manual_seed(1234)
    for b, hq, hkv, t, d in ((4, 12, 12, 1024, 64), (1, 32, 8, 2048, 128)):
        def rand(*shape):
            return (torch.rand(*shape, device=device, generator=gen) * 2 - 1).to(torch.bfloat16)

        q = rand(b, hq, t, d).requires_grad_()
        k, v = rand(b, hkv, t, d), rand(b, hkv, t, d)
        kwargs = {}
        if hkv != hq:
            if has_gqa:
                kwargs["enable_gqa"] = True
            else:
                k = k.repeat_interleave(hq // hkv, dim=1)
                v = v.repeat_interleave(hq // hkv, dim=1)
        k.requires_grad_()
        v.requires_grad_()
        dout = rand(b, hq, t, d)
        fwd_flops = 4.0 * b * hq * t * t * d / 2  # causal

        def forward():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, **kwargs)

        def forward_backward():
            out = forward()
            return torch.autograd.grad(out, (q, k, v), dout)

        for name, backend in backends:
            label = f"B {b} Hq {hq:2d} Hkv {hkv:2d} T {t:5d} D {d:3d} causal bf16  torch-{name:<9}"
            try:
                if backend is None:
                    f_ms, fb_ms = median_ms(forward), median_ms(forward_backward)
                else:
                    with sdpa_kernel(backend):
                        f_ms, fb_ms = median_ms(forward), median_ms(forward_backward)
            except RuntimeError as e:  # the backend does not take this shape / dtype / GPU
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                print(f"{label}  unavailable: {first[:120]}")
                continue
            print(f"{label}  fwd {f_ms:8.3f} ms {fwd_flops / (f_ms * 1e9):7.1f} TFLOP/s   "
                  f"fwd+bwd {fb_ms:8.3f} ms {3.5 * fwd_flops / (fb_ms * 1e9):7.1f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
