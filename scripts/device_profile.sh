#!/usr/bin/env bash
# On a lent GPU machine, after scripts/device_check.sh has built build/device in the
# same command: Nsight Compute (ncu) reports of the kernels whose speed is least
# understood, so that the next change to them rests on what limits them (tensor pipe,
# shared memory, issue slots, occupancy, stalls) rather than on a guess. One launch
# of each, the first that matches (the GPT-2 shapes, which the benches run first):
# attention's forward, dk/dv and dq tensor-core kernels (D 64, causal bf16), and
# cross-entropy's forward and backward over GPT-2's [8192, 50257] bf16 logits.
# Each writes $OUT/ncu-<name>.txt (or /tmp/dtr-device/...); stdout gets its headline
# figures.
#   scripts/device_check.sh; scripts/device_profile.sh [name ...]   (names: only those)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-/tmp/dtr-device}
mkdir -p "$out"
bin=build/device/bench
only=("$@")
status=0

command -v ncu >/dev/null || { echo "device_profile: ncu is not on PATH"; exit 1; }
[[ -d $bin ]] || { echo "device_profile: $bin missing: run scripts/device_check.sh first (same command)"; exit 1; }

sections=(--section SpeedOfLight --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis
          --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats)
headline='Duration|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Cache Throughput|Registers Per Thread|'
headline+='Theoretical Occupancy|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|ERR|rror'

# profile NAME KERNEL_REGEX EXECUTABLE [ARGS...]
profile() {
  local name=$1 regex=$2 exe=$3
  shift 3
  if [[ ${#only[@]} -gt 0 && ! " ${only[*]} " =~ " $name " ]]; then return 0; fi
  if [[ ! -x $bin/$exe ]]; then
    echo "== $name: $bin/$exe not built, skipped"
    return 0
  fi
  local log="$out/ncu-$name.txt" rc
  echo "== $name (kernel ~ $regex in $exe)"
  timeout --kill-after=10 180 ncu --target-processes all -k "regex:$regex" -c 1 "${sections[@]}" \
    "$bin/$exe" "$@" >"$log" 2>&1
  rc=$?
  grep -E "$headline" "$log" | head -n 16
  [[ $rc -eq 0 ]] || status=1
  echo "-- $name: exit $rc, log $log"
}

profile attention_forward 'attention_forward_tc' dtr_attention_bench
profile attention_dkdv 'attention_dkdv_tc' dtr_attention_bench
profile attention_dq 'attention_dq_tc' dtr_attention_bench
profile cross_entropy_forward 'cross_entropy_forward_kernel' dtr_cuda_rowwise_bench
profile cross_entropy_backward 'cross_entropy_backward_kernel' dtr_cuda_rowwise_bench
exit $status
