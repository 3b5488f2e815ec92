#!/usr/bin/env bash
# On a lent GPU machine (no network; dependencies from .devdeps, see
# ../shared/device/README.md): configure for Hopper, build, run the unit and gpu
# tests, then any benchmarks named as arguments. Logs go to $OUT when set.
# DTR_DEVICE_TARGETS="dtr_gpu_tests dtr_unit_tests ..." builds only those targets (the
# whole build is the slow part of a device call). Then, in the same call if wanted:
# python3 scripts/device_sanitize.py (compute-sanitizer over the gpu tests).
#   scripts/device_check.sh [bench-executable ...]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/dtr-device}
mkdir -p "$out"
source .devdeps/devdeps.sh unpack || exit 1
cmake -S . -B build/device -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTR_CUDA=ON -DDTR_WERROR=${DTR_WERROR:-ON} \
  -DCMAKE_CUDA_ARCHITECTURES=90 $DEVDEPS_CMAKE_ARGS >"$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
cmake --build build/device --parallel ${DTR_DEVICE_TARGETS:+--target $DTR_DEVICE_TARGETS} >"$out/build.log" 2>&1 || { grep -E "error|Error" -A5 "$out/build.log" | head -60; exit 1; }
nvidia-smi -L
status=0
ctest --test-dir build/device --output-on-failure -L "unit|gpu" -j 8 >"$out/ctest.log" 2>&1 || status=1
grep -E "tests passed|Failed|\*\*\*" "$out/ctest.log" | tail -30
for bench in "$@"; do
  echo "== $bench"
  "./build/device/bench/$bench" 2>&1 | tee "$out/$bench.log" | tail -40
done
exit $status
