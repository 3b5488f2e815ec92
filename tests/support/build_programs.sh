#!/usr/bin/env bash
# Builds every <scratch>/src/<name>.cpp as program <name> of one project that uses
# dtr as an installed package (find_package(dtr) from <scratch>/prefix, linking
# dtr::dtr), unoptimised, with <cxx flags>, into <scratch>/build, with <dtr/dtr.h>
# precompiled once. On a compile error prints the first errors and exits 1 (the
# full log is <scratch>/build.log).
# Usage: build_programs.sh <scratch> <project name> <cxx flags>
set -euo pipefail
scratch=$1 project=$2 flags=$3
{
  echo "cmake_minimum_required(VERSION 3.25)"
  echo "project($project CXX)"
  echo "find_package(dtr REQUIRED)"
  # dtr's common API parsed once for all programs: the first precompiles it, the
  # others reuse it (each program still includes it itself).
  first=""
  for f in "$scratch"/src/*.cpp; do
    name=$(basename "$f" .cpp)
    echo "add_executable($name src/$name.cpp)"
    echo "target_link_libraries($name PRIVATE dtr::dtr)"
    if [[ -z $first ]]; then
      first=$name
      echo "target_precompile_headers($name PRIVATE <dtr/dtr.h>)"
    else
      echo "target_precompile_headers($name REUSE_FROM $first)"
    fi
  done
} >"$scratch/CMakeLists.txt"
cmake -S "$scratch" -B "$scratch/build" -G Ninja -DCMAKE_PREFIX_PATH="$scratch/prefix" -DCMAKE_BUILD_TYPE= \
  -DCMAKE_CXX_FLAGS="$flags" >/dev/null
if ! cmake --build "$scratch/build" -- -k 0 >"$scratch/build.log" 2>&1; then
  grep -E "error" "$scratch/build.log" | head -20
  exit 1
fi
