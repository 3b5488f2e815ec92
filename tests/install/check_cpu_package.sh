#!/usr/bin/env bash
# The package of a build without CUDA (the quickstart's build/release, in CI) works
# for a consumer with no trace of CUDA: its CMake files name no CUDA or NCCL target,
# library or definition; check_install.sh then installs it, moves it, builds the
# consumer there and runs it, alone and loading a Hugging Face fixture under
# fully_shard on 2 ranks; and the consumer's binary needs no CUDA or NCCL library.
# A package built with fewer CPU levels must refuse a level it lacks, by name.
# Prints the consumer's size.
# Usage: check_cpu_package.sh <dtr build dir without CUDA> <scratch dir>
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(realpath "$1") scratch=$(realpath -m "$2")
if ! grep -q "^set(DTR_WITH_CUDA OFF)" "$build/dtrConfig.cmake"; then
  echo "FAIL: $build is not a build without CUDA (its dtrConfig.cmake); configure it with -DDTR_CUDA=OFF" >&2
  exit 1
fi
flags=(--oversubscribe --bind-to none)
[[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
"$here/check_install.sh" "$build" "$here/consumer" "$scratch" "$here/../fixtures/hf/llama_gqa" \
  "$(command -v mpirun)" "${flags[@]}"
package=$(find "$scratch/moved" -path "*/cmake/dtr" -type d)
if grep -niE "cuda::|nccl|cudart|DTR_WITH_CUDA=1" "$package"/dtrTargets*.cmake; then
  echo "FAIL: the CPU-only package names CUDA or NCCL (above)" >&2
  exit 1
fi
needed=$(readelf -d "$scratch/build/consumer" | grep NEEDED || true)
if grep -iE "cuda|nccl" <<<"$needed"; then
  echo "FAIL: the consumer of the CPU-only package needs CUDA or NCCL libraries (above)" >&2
  exit 1
fi
# A package with fewer CPU levels (DTR_CPU_LEVELS) refuses, by name, a level it lacks.
missing=$(grep -o "DTR_CPU_WITHOUT_[A-Z0-9]*" "$package"/dtrTargets.cmake | head -1 | sed 's/DTR_CPU_WITHOUT_//' |
          tr 'A-Z' 'a-z' || true)
if [[ -n $missing ]]; then
  if out=$(DTR_CPU_CAPABILITY=$missing "$scratch/build/consumer" 2>&1); then
    echo "FAIL: the consumer ran with DTR_CPU_CAPABILITY=$missing, a level its package lacks" >&2
    exit 1
  fi
  if ! grep -q "DTR_CPU_CAPABILITY=$missing: this build of dtr has the CPU kernels for .* only" <<<"$out"; then
    echo "FAIL: DTR_CPU_CAPABILITY=$missing, a level the package lacks, gave: $out" >&2
    exit 1
  fi
fi
echo "CPU-only package: consumer built and ran; its binary is" \
  "$(du -h "$scratch/build/consumer" | cut -f1) and needs:" $(sed -E 's/.*\[(.*)\]/\1/' <<<"$needed")
