#!/usr/bin/env bash
# Runs the level parity tests under qemu-user emulating a CPU that has exactly the
# given level: any instruction above it (an AVX one in a baseline run, an AVX-512
# one in an avx2 run) is an illegal instruction there and ends the run.
# Usage: run_under_qemu.sh <qemu cpu model> <level it has> <dtr_cpu_level_tests>
# Exits 77 (a CTest skip) when qemu-x86_64 is not installed (scripts/setup.sh installs it).
set -uo pipefail
model=$1 level=$2 binary=$3
if ! command -v qemu-x86_64 >/dev/null; then
  echo "SKIP: qemu-x86_64 is not installed (apt-get install qemu-user, as scripts/setup.sh does)"
  exit 77
fi
# (qemu warns about features of the model it does not emulate, none of them SIMD.)
run() { qemu-x86_64 -cpu "$model" "$@" 2> >(grep -v "TCG doesn.t support requested feature" >&2); }

echo "== the kernels detect $level on an emulated $model"
out=$(run "$binary" --print-cpu-level 2>&1)
echo "$out"
if ! grep -q "cpu level: $level (detected)" <<<"$out"; then
  echo "FAIL: expected 'cpu level: $level (detected)'"
  exit 1
fi

if [[ $level == baseline ]]; then
  echo "== DTR_CPU_CAPABILITY=avx2 on an emulated $model is refused, not an illegal instruction"
  out=$(DTR_CPU_CAPABILITY=avx2 run "$binary" --print-cpu-level 2>&1)
  echo "$out"
  if ! grep -q "this CPU supports only up to baseline" <<<"$out"; then
    echo "FAIL: expected the unsupported level to be refused"
    exit 1
  fi
fi

echo "== every kernel family at $level on an emulated $model"
DTR_TEST_CPU_LEVEL=$level run "$binary"
