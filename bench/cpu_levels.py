#!/usr/bin/env python3
"""The CPU benchmarks at each instruction-set level this CPU has, interleaved.

Runs dtr_gemm_bench (f32 1024^3 GEMM through the matmul op, 1 thread and all
threads) and dtr_train_step_bench (GPT-2 124M step, B=4 T=64, f32, AdamW) with
DTR_CPU_CAPABILITY set to each supported level in turn, for several rounds, and
prints each figure's median per level and its ratio to the baseline level. The
baseline level is what a build for the x86-64 baseline (SSE2) runs at.

  bench/cpu_levels.py [--build build/release] [--rounds 3]
"""
import argparse
import re
import statistics
import subprocess
import sys


def run(binary, level, *args):
    env = {"DTR_CPU_CAPABILITY": level, "PATH": "/usr/bin:/bin"}
    out = subprocess.run([binary, *args], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        return None, out.stdout + out.stderr
    return out.stdout, None


def gemm_figures(text):
    # "  1024 |     32.0 GF/s |      32.2 GF/s |    100.5% |      63.2 GF/s |    1.96x"
    row = re.search(r"^\s*1024 \|[^|]*\|\s*([\d.]+) GF/s \|[^|]*\|\s*([\d.]+) GF/s", text, re.M)
    return {"GEMM 1024^3, 1 thread (GFLOP/s)": float(row.group(1)),
            "GEMM 1024^3, all threads (GFLOP/s)": float(row.group(2))}


def step_figures(text):
    # the line after the "ms/step tokens/s ..." header
    row = re.search(r"ms/step.*\n\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", text)
    return {"GPT-2 124M step (ms)": float(row.group(1)),
            "GPT-2 step / GEMM rate (%)": 100 * float(row.group(3)) / float(row.group(4))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build/release")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    levels = []
    for level in ["baseline", "avx2", "avx512"]:
        out, err = run(f"{args.build}/bench/dtr_gemm_bench", level)
        if out is None:
            print(f"{level}: not run here ({err.strip().splitlines()[-1]})")
            continue
        levels.append(level)
    figures = {level: {} for level in levels}
    for r in range(args.rounds):
        for level in levels:
            gemm, _ = run(f"{args.build}/bench/dtr_gemm_bench", level)
            step, _ = run(f"{args.build}/bench/dtr_train_step_bench", level, "2")
            for name, value in {**gemm_figures(gemm), **step_figures(step)}.items():
                figures[level].setdefault(name, []).append(value)
            print(f"round {r + 1}/{args.rounds}, {level}: done", file=sys.stderr)
    names = list(figures[levels[0]])
    print(f"{'median of ' + str(args.rounds) + ' rounds':<38}" + "".join(f"{lv:>12}" for lv in levels)
          + "".join(f"{lv + '/base':>14}" for lv in levels[1:]))
    for name in names:
        med = {lv: statistics.median(figures[lv][name]) for lv in levels}
        print(f"{name:<38}" + "".join(f"{med[lv]:>12.1f}" for lv in levels)
              + "".join(f"{med[lv] / med['baseline']:>13.2f}x" for lv in levels[1:]))


if __name__ == "__main__":
    main()
