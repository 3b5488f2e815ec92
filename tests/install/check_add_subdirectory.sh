#!/usr/bin/env bash
# A project that adds dtr's sources with add_subdirectory builds only the library:
# no tests, benchmarks, examples or programs, so it needs neither Catch2 nor CLI11
# (configured with both made unfindable). Then it builds and runs the consumer.
# To be quick the library is built unoptimised (-O0, no build type), for the CPU only,
# at this CPU's level, each layer in one unity batch; the consumer's check is a small one.
# Usage: check_add_subdirectory.sh <dtr source dir> <consumer source dir> <scratch dir>
set -euo pipefail
source=$1 consumer=$2 scratch=$3
rm -rf "$scratch" && mkdir -p "$scratch"
cmake -S "$consumer" -B "$scratch" -G Ninja -DCMAKE_BUILD_TYPE= -DCMAKE_CXX_FLAGS=-O0 -DDTR_SOURCE_DIR="$source" \
  -DCMAKE_DISABLE_FIND_PACKAGE_Catch2=ON -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON \
  -DDTR_CUDA=OFF -DDTR_CPU_LEVELS=host -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=0 >"$scratch/configure.log" 2>&1 ||
  { cat "$scratch/configure.log"; echo "FAIL: configuring a project that adds dtr as a subdirectory" >&2; exit 1; }
targets=$(ninja -C "$scratch" -t targets all)
for unwanted in dtr_unit_tests dtr_mpi_tests dtr-train dtr-ckpt dtr_gemm_bench hello_regression; do
  if grep -qE "(^|/)$unwanted(:| )" <<<"$targets"; then
    echo "FAIL: the embedding project got dtr's target $unwanted" >&2
    exit 1
  fi
done
cmake --build "$scratch" --target consumer >"$scratch/build.log" 2>&1 ||
  { tail -40 "$scratch/build.log"; echo "FAIL: building the consumer" >&2; exit 1; }
"$scratch/consumer"
