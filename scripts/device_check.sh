#!/usr/bin/env bash
# The whole GPU verification in one device call, under one time budget: on a lent
# GPU machine (no network; dependencies from .devdeps, see ../shared/device/README.md)
# configure for sm_90, build only what the GPU checks need with every core, run every
# `gpu` test (the `gpu;mpi` ones included) with a per-test limit, the benchmarks with
# their yardsticks (scripts/device_bench.sh: cuBLAS, copy bandwidth, PyTorch SDPA,
# PyTorch GPT-2), then compute-sanitizer memcheck over as many gpu tests as the time
# left allows (scripts/device_sanitize.py). The PyTorch yardsticks run during the build,
# pinned to two cores the build leaves free, since they need the GPU and not the build.
#
# Each phase starts only if its share fits in what is left of DTR_DEVICE_BUDGET_S, so a
# call's timeout is never what ends it. Logs go to /tmp/dtr-device as they are written;
# at the end (or on any exit) they are packed into $OUT/logs.tgz, because a call returns
# at most 8 files, and the summary table is printed last.
#
#   DTR_DEVICE_BUDGET_S=540 bash scripts/device_check.sh
#   DTR_DEVICE_PHASES="build sanitize" ...   (a later call on the same warm machine:
#                                              the build is then a no-op)
# Other knobs: DTR_DEVICE_TARGETS (what to build), DTR_WERROR (default OFF here: the
# device's compiler may warn where CI's does not; CI builds with -Werror),
# DTR_SANITIZE_FILTER (a regex: these gpu tests go through memcheck first).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
t0=$(date +%s)
deadline=$((t0 + ${DTR_DEVICE_BUDGET_S:-540}))
phases=${DTR_DEVICE_PHASES:-"build tests bench sanitize"}
work=/tmp/dtr-device
mkdir -p "$work"
summary=$work/summary.txt
: >"$summary"

left() { echo $((deadline - $(date +%s))); }
# pin CPUS COMMAND...: runs COMMAND on those cores (taskset), or unpinned without taskset.
pin() {
  if command -v taskset >/dev/null; then taskset -c "$@"; else "${@:2}"; fi
}
wanted() { [[ " $phases " == *" $1 "* ]]; }
note() { printf '%-34s %s\n' "$1" "$2" | tee -a "$summary"; }
pack() {
  if [[ -n ${OUT:-} ]]; then
    tar czf "$OUT/logs.tgz" -C "$work" . 2>/dev/null
    cp "$summary" "$OUT/summary.txt"
  fi
  [[ -f $work/benches.txt ]] && cat "$work/benches.txt"
  echo "==== summary ($(($(date +%s) - t0)) s)"
  cat "$summary"
}
trap pack EXIT

{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
  nvcc --version | tail -2
  g++ --version | head -1
  cmake --version | head -1
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
  command -v compute-sanitizer ncu
} >"$work/machine.log" 2>&1
note machine "$(head -1 "$work/machine.log")"

# The PyTorch yardsticks run with the machine's own library path, not the one for dtr's
# dependencies that devdeps.sh sets up.
export DTR_TORCH_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
source .devdeps/devdeps.sh unpack >"$work/devdeps.log" 2>&1 || { note devdeps "unpack failed"; exit 1; }

# NCCL: the toolkit's when it has one, else the wheel beside the machine's PyTorch.
nccl_args=()
if [[ ! -e /usr/local/cuda/include/nccl.h ]]; then
  nccl_root=$(python3 -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])" 2>/dev/null)
  lib=$(ls "$nccl_root"/lib/libnccl.so* 2>/dev/null | head -1)
  if [[ -n $lib && -e $nccl_root/include/nccl.h ]]; then
    nccl_args=(-DDTR_NCCL_INCLUDE_DIR="$nccl_root/include" -DDTR_NCCL_LIBRARY="$lib")
    export LD_LIBRARY_PATH=$nccl_root/lib:$LD_LIBRARY_PATH
  fi
fi

targets=${DTR_DEVICE_TARGETS:-"dtr_gpu_tests dtr_gpu_mpi_tests dtr_cuda_gemm_bench dtr_cuda_rowwise_bench
  dtr_attention_bench dtr_gpu_train_step_bench dtr_cuda_reduce_bench dtr_cuda_adamw_bench dtr-train
  collective_fault_probe"}
cores=$(nproc)
build_cores=$((cores > 4 ? cores - 2 : cores))

if wanted build; then
  t=$(date +%s)
  cmake -S . -B build/device -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTR_CUDA=ON -DDTR_WERROR=${DTR_WERROR:-OFF} \
    -DCMAKE_CUDA_ARCHITECTURES=90 "${nccl_args[@]}" $DEVDEPS_CMAKE_ARGS >"$work/configure.log" 2>&1 ||
    { note configure "FAILED (configure.log)"; tail -30 "$work/configure.log"; exit 1; }
  note configure "ok, $(($(date +%s) - t)) s; $(grep -E 'NCCL' "$work/configure.log" | head -1 | sed 's/^-- //')"

  # Only the targets this configuration has (the NCCL ones need NCCL).
  present=
  for target in $targets; do
    if ninja -C build/device -t query "$target" >/dev/null 2>&1; then present+=" $target"; else note "  not a target" "$target"; fi
  done
  targets=$present

  # The PyTorch yardsticks, on the two cores the build leaves free.
  yardsticks_pid=
  if wanted bench && ((cores > 4)); then
    (
      yardstick() {
        local name=$1 limit=$2
        shift 2
        local s=$(date +%s)
        LD_LIBRARY_PATH=$DTR_TORCH_LD_LIBRARY_PATH pin $((cores - 2)),$((cores - 1)) timeout -k 5 "$limit" "$@" >"$work/$name.log" 2>&1
        echo "$name: exit $?, $(($(date +%s) - s)) s" >>"$work/yardsticks.status"
      }
      yardstick torch_sdpa_bench 100 python3 bench/torch_sdpa_bench.py --runs 10
      yardstick torch_gpt2_step_during_build 60 python3 bench/torch_gpt2_step.py --batch 8 --seq 1024 --warmup 3 --steps 10
    ) &
    yardsticks_pid=$!
  fi

  t=$(date +%s)
  pin 0-$((build_cores - 1)) timeout -k 10 $(($(left) - 60)) \
    cmake --build build/device --parallel "$build_cores" --target $targets >"$work/build.log" 2>&1
  rc=$?
  if ((rc != 0)); then
    note build "FAILED rc $rc after $(($(date +%s) - t)) s (build.log)"
    grep -E "error|Error" -A5 "$work/build.log" | head -60
    exit 1
  fi
  note build "ok, $(($(date +%s) - t)) s on $build_cores cores"
  [[ -n $yardsticks_pid ]] && wait "$yardsticks_pid"
  [[ -f $work/yardsticks.status ]] && while read -r line; do note "yardstick" "$line"; done <"$work/yardsticks.status"
fi

status=0
if wanted tests; then
  # Up to 180 s, leaving the benches about 200 s when the build was quick.
  limit=$(($(left) - 200))
  ((limit > 180)) && limit=180
  ((limit < 60)) && limit=$(($(left) - 10))
  if ((limit < 60)); then
    note "gpu tests" "not run: $(left) s left"
  else
    t=$(date +%s)
    OMPI_MCA_mpi_yield_when_idle=1 timeout -k 10 "$limit" ctest --test-dir build/device -L gpu -j 8 --timeout 90 \
      --output-on-failure >"$work/ctest.log" 2>&1 || status=1
    note "gpu tests" "$(grep -E 'tests passed' "$work/ctest.log" || echo "no result (killed after ${limit} s?)"), $(($(date +%s) - t)) s"
    grep -E "^\s+[0-9]+ - .*\((Failed|Timeout|Not Run|SEGFAULT|Exception)|\(Skipped\)" "$work/ctest.log" | head -40 |
      while read -r line; do note "  " "$line"; done
  fi
fi

if wanted bench; then
  if (($(left) < 90)); then
    note benches "not run: $(left) s left"
  else
    t=$(date +%s)
    OUT=$work DTR_BENCH_DEADLINE=$((deadline - 30)) bash scripts/device_bench.sh dtr_cuda_gemm_bench \
      dtr_cuda_rowwise_bench dtr_attention_bench dtr_gpu_train_step_bench dtr_cuda_reduce_bench dtr_cuda_adamw_bench \
      dtr_train_cuda torch_gpt2_step >"$work/benches.txt" 2>&1 || status=1
    note benches "$(grep -c '^-- .*exit 0' "$work/benches.txt") ran clean, $(grep -c '^!!\|exit [1-9]\|skipped' "$work/benches.txt") not, $(($(date +%s) - t)) s"
  fi
fi

if wanted sanitize; then
  # No test starts after the budget, and each may run its 60 s limit past it.
  budget=$(($(left) - 100))
  if ((budget < 30)); then
    note memcheck "not run: $(left) s left"
  else
    first=${DTR_SANITIZE_FILTER:-"(?i)gemm|matmul|linear|cross.entropy|softmax|sgd|adamw|bf16|dropout|rope|allocator|caching"}
    python3 scripts/device_sanitize.py --tool memcheck --filter "$first" --jobs 8 --limit 60 \
      --budget "$budget" --out "$work" >"$work/memcheck.txt" 2>&1 || status=1
    note "memcheck" "$(tail -1 "$work/memcheck.txt")"
    grep -E "^   (HAZARDS|FAILED|TIMEOUT|NO-SUMMARY)" "$work/memcheck.txt" | head -20 | while read -r line; do note "  " "$line"; done
  fi
fi
exit $status
