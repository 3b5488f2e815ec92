#!/usr/bin/env python3
"""dtr's CPU benchmarks against PyTorch on the same machine, interleaved.

Each round runs, one after another: the f32 1024^3 GEMM (dtr_gemm_bench's
all-threads figure, torch.mm), the f32 GEMM on every row of dtr_gemm_bench's
shapes table (transposes, GPT-2 and Llama layer shapes), the GPT-2 124M step,
B=4 T=64, AdamW (dtr_train_step_bench, torch), and the FSDP step of
dtr_fsdp_step_bench's default shape at each --ranks (dtr under mpirun; PyTorch
FSDP2 over gloo under torch.distributed.run). It prints each figure's median over
the rounds and the ratio dtr / PyTorch, under a header naming the CPU model and
the f32 FMA peak that dtr_gemm_bench measures at dtr's CPU level (GEMM figures
also as a share of it: the same code measures differently on Intel and AMD). The
PyTorch side is bench/torch_cpu_yardstick.py, run by --python (an interpreter
with torch installed; nothing in the project needs it).

  bench/cpu_vs_torch.py --python /path/to/venv/bin/python [--build build/release]
      [--rounds 3] [--ranks 1 2]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cpu_levels import gemm_figures, step_figures  # noqa: E402

# "Intel(R) Xeon(R) Processor; measured FMA peak at avx512: 147.2 GFLOP/s on 1 thread, 293.9 on 2"
PEAK_LINE = re.compile(r"^(.*); measured FMA peak at (\w+): ([\d.]+) GFLOP/s on 1 thread, ([\d.]+) on (\d+)$", re.M)
# "        gpt2 qkv forward |     256 x 2304 x 768 | NT |   250.0 GF/s |   85.0%"
SHAPE_ROW = re.compile(r"^\s*([a-z0-9 ]+?) \|\s*(\d+) x (\d+) x (\d+) \| ([NT]{2}) \|\s*([\d.]+) GF/s", re.M)
# "yardstick gemm-shapes gpt2 qkv forward 256x2304x768 NT: 250.0 GFLOP/s"
TORCH_SHAPE = re.compile(r"^yardstick gemm-shapes (.+) (\d+)x(\d+)x(\d+) ([NT]{2}): ([\d.]+) GFLOP/s", re.M)


def shape_rates(pattern, text):
    return {f"{m[0]} {m[1]}x{m[2]}x{m[3]} {m[4]}": float(m[5]) for m in pattern.findall(text)}


def f32_shapes_table(gemm_text):
    """dtr_gemm_bench's f32 shapes table: the bf16 table after it repeats some of
    its rows, with the bf16 rate first."""
    return gemm_text.split("\nbf16 through")[0]


def run(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout}{out.stderr}")
    return out.stdout


def yardstick_text(args, what, ranks=1):
    """What torch_cpu_yardstick.py prints for `what`."""
    script = os.path.join(HERE, "torch_cpu_yardstick.py")
    if what == "fsdp":
        cmd = [args.python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
               script, "fsdp", "--steps", "5"]
    else:
        cmd = [args.python, script, what]
    return run(cmd, {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // ranks))})


def yardstick(args, what, ranks=1):
    text = yardstick_text(args, what, ranks)
    return float(re.search(rf"^yardstick {what}: ([\d.]+)", text, re.M).group(1))


def dtr_fsdp(args, ranks):
    mpirun = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(ranks)]
    if os.geteuid() == 0:
        mpirun.insert(1, "--allow-run-as-root")
    text = run(mpirun + [f"{args.build}/bench/dtr_fsdp_step_bench", "--steps", "5", "--no-compare-unsharded"],
               {"OMPI_MCA_mpi_yield_when_idle": "1"})
    return float(re.search(r"^\s*FSDP \|\s*([\d.]+)", text, re.M).group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="a Python interpreter with torch")
    parser.add_argument("--build", default="build/release")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    torch_version = run([args.python, "-c", "import torch; print(torch.__version__)"]).strip()
    # name -> (unit, [dtr values], [torch values])
    rows = {"f32 GEMM 1024^3, all threads": ("GFLOP/s", [], []),
            "GPT-2 124M step, B=4 T=64, AdamW": ("ms", [], [])}
    for ranks in args.ranks:
        rows[f"FSDP step 6x384, {ranks} rank(s)"] = ("ms", [], [])
    shapes = {}  # name -> ([dtr values], [torch values])
    peaks = []
    for r in range(args.rounds):
        gemm_text = run([f"{args.build}/bench/dtr_gemm_bench"])
        peak = PEAK_LINE.search(gemm_text)
        peaks.append(float(peak.group(4)))
        gemm = gemm_figures(gemm_text)
        rows["f32 GEMM 1024^3, all threads"][1].append(gemm["GEMM 1024^3, all threads (GFLOP/s)"])
        rows["f32 GEMM 1024^3, all threads"][2].append(yardstick(args, "gemm"))
        torch_shapes = shape_rates(TORCH_SHAPE, yardstick_text(args, "gemm-shapes"))
        for name, rate in shape_rates(SHAPE_ROW, f32_shapes_table(gemm_text)).items():
            shapes.setdefault(name, ([], []))[0].append(rate)
            shapes[name][1].append(torch_shapes[name])
        step_text = run([f"{args.build}/bench/dtr_train_step_bench", "2"])
        if r == 0:  # its first line names the model, threads and CPU level
            print(f"{peak.group(1)}, {os.cpu_count()} cores")
            print(f"dtr: {step_text.splitlines()[0]}\nPyTorch {torch_version}")
        step = step_figures(step_text)
        rows["GPT-2 124M step, B=4 T=64, AdamW"][1].append(step["GPT-2 124M step (ms)"])
        rows["GPT-2 124M step, B=4 T=64, AdamW"][2].append(yardstick(args, "step"))
        for ranks in args.ranks:
            rows[f"FSDP step 6x384, {ranks} rank(s)"][1].append(dtr_fsdp(args, ranks))
            rows[f"FSDP step 6x384, {ranks} rank(s)"][2].append(yardstick(args, "fsdp", ranks))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"\n{'median of ' + str(args.rounds) + ' rounds':<36} {'unit':>8} {'dtr':>9} {'PyTorch':>9} "
          f"{'dtr/PyTorch':>12}")
    for name, (unit, dtr_values, torch_values) in rows.items():
        d, t = statistics.median(dtr_values), statistics.median(torch_values)
        print(f"{name:<36} {unit:>8} {d:>9.1f} {t:>9.1f} {d / t:>11.2f}x")
    peak = statistics.median(peaks)
    print(f"\nf32 GEMM, all threads, GFLOP/s; measured FMA peak {peak:.1f} GFLOP/s (median of {args.rounds})")
    print(f"{'shape':<52} {'dtr':>7} {'PyTorch':>8} {'dtr/PyTorch':>12} {'dtr/peak':>9} {'PyTorch/peak':>13}")
    for name, (dtr_values, torch_values) in shapes.items():
        d, t = statistics.median(dtr_values), statistics.median(torch_values)
        print(f"{name:<52} {d:>7.1f} {t:>8.1f} {d / t:>11.2f}x {100 * d / peak:>8.1f}% {100 * t / peak:>12.1f}%")


if __name__ == "__main__":
    main()
