#!/usr/bin/env bash
# On a lent GPU machine, after scripts/device_check.sh has built build/device in the
# same command: runs the dtr GPU benchmarks that were built (dtr_cuda_gemm_bench
# --quick, dtr_cuda_elementwise_bench, dtr_cuda_reduce_bench, dtr_cuda_rowwise_bench, and when present
# dtr_attention_bench, dtr_cuda_adamw_bench, dtr_gpu_train_step_bench), dtr-train
# --device cuda on the small model, and the
# PyTorch yardsticks (bench/torch_sdpa_bench.py, bench/torch_gpt2_step.py in autocast
# and fsdp2 modes), when python3 can import torch. Each writes $OUT/<name>.log (or
# /tmp/dtr-device/<name>.log); stdout gets a short summary per bench (its last
# lines, or the error). Every bench runs under its own time limit so that the whole
# stays under ~4 minutes; a bench past its limit is killed and reported. With
# DTR_BENCH_DEADLINE (a time in seconds since the epoch), a bench whose limit would
# pass it is skipped and reported, so that the caller's own budget holds. The order
# puts the figures the GPU targets name first: GEMM, rowwise, attention, the step.
#   scripts/device_check.sh; scripts/device_bench.sh [name ...]   (names: run only those)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-/tmp/dtr-device}
mkdir -p "$out"
bin=build/device/bench
only=("$@")
status=0

wanted() {
  [[ ${#only[@]} -eq 0 ]] && return 0
  local n
  for n in "${only[@]}"; do [[ $n == "$1" ]] && return 0; done
  return 1
}

# run NAME LIMIT_S SUMMARY_LINES COMMAND...: logs to $out/NAME.log, prints a summary.
run() {
  local name=$1 limit=$2 lines=$3
  shift 3
  wanted "$name" || return 0
  local log="$out/$name.log" t0 rc
  if [[ -n ${DTR_BENCH_DEADLINE:-} ]] && (($(date +%s) + limit > DTR_BENCH_DEADLINE)); then
    echo "== $name: skipped, its ${limit} s limit would pass the deadline"
    status=1
    return 0
  fi
  echo "== $name ($*)"
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  if [[ $rc -eq 0 ]]; then
    tail -n "$lines" "$log"
  else
    [[ $rc -eq 124 || $rc -eq 137 ]] && echo "!! $name: killed after its ${limit} s limit"
    tail -n 12 "$log"
    status=1
  fi
  echo "-- $name: exit $rc, $(($(date +%s) - t0)) s, log $log"
}

# run_bin NAME LIMIT_S SUMMARY_LINES [ARGS...]: a dtr bench executable, when built.
run_bin() {
  local name=$1
  wanted "$name" || return 0
  if [[ ! -x $bin/$name ]]; then
    echo "== $name: not built ($bin/$name missing), skipped"
    return 0
  fi
  run "$name" "$2" "$3" "$bin/$name" "${@:4}"
}

[[ -d $bin ]] || { echo "device_bench: $bin missing: run scripts/device_check.sh first (same command)"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null || true

run_bin dtr_cuda_gemm_bench 60 22 --quick
run_bin dtr_cuda_rowwise_bench 40 24
run_bin dtr_attention_bench 30 6
run_bin dtr_gpu_train_step_bench 75 20 --batch 8 --seq 1024 --warmup 3 --steps 10 --breakdown 2 --kernel-table 30
run_bin dtr_cuda_reduce_bench 25 16
run_bin dtr_cuda_adamw_bench 25 10
run_bin dtr_cuda_elementwise_bench 25 10
# dtr-train itself on the GPU (issue 9's --device cuda): the small model, bf16, on the
# embedded corpus; the last lines show the loss falling, tokens/s, MFU and the sample.
run dtr_train_cuda 60 6 build/device/dtr-train/dtr-train --device cuda --model small --mixed-precision bf16 \
  --steps 60 --eval-every 30 --log-every 10 --progress-bar off --out /tmp/dtr_train_cuda --overwrite

# PyTorch with its own library path when device_check.sh set one aside (devdeps.sh's
# is for dtr's dependencies).
[[ -n ${DTR_TORCH_LD_LIBRARY_PATH+set} ]] && export LD_LIBRARY_PATH=$DTR_TORCH_LD_LIBRARY_PATH
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; then
  # 90 s: importing torch and building four backends' kernels for two shapes does not
  # always fit 30 s.
  run torch_sdpa_bench 90 10 python3 bench/torch_sdpa_bench.py
  run torch_gpt2_step 45 9 python3 bench/torch_gpt2_step.py --batch 8 --seq 1024 --warmup 3 --steps 10
  run torch_gpt2_step_fsdp2 45 9 python3 bench/torch_gpt2_step.py --mode fsdp2 --batch 8 --seq 1024 --warmup 3 \
    --steps 10
else
  echo "== PyTorch yardsticks skipped: python3 cannot import torch with CUDA here"
fi
exit $status
