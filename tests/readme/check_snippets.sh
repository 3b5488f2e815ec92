#!/usr/bin/env bash
# Builds every C++ snippet of README.md as the README shows it: its #include lines
# at file scope, the rest as the body of main() after `using namespace dtr;` (the
# README says so where its snippets start). Each becomes a program of a project
# that uses dtr as an installed package (find_package(dtr)), built and linked,
# not run (some need mpirun or a GPU). A snippet that does not compile fails the
# test, naming its line in README.md.
# Usage: check_snippets.sh <README.md> <dtr build dir> <scratch dir>
set -euo pipefail
readme=$1 build=$2 scratch=$3
rm -rf "$scratch" && mkdir -p "$scratch/src"
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
# snippet_<line>.cpp for each ```cpp block, <line> its first line in README.md.
awk -v dir="$scratch/src" '
  /^```cpp/ { inside = 1; start = NR + 1; head = ""; body = ""; in_head = 1; next }
  inside && /^```/ {
    file = dir "/snippet_" start ".cpp"
    printf "// README.md, the snippet at line %d\n%s\nint main() {\n  using namespace dtr;\n%s  return 0;\n}\n",
           start, head, body > file
    close(file); inside = 0; next
  }
  inside {
    if (in_head && ($0 ~ /^#include/ || $0 ~ /^$/)) { head = head $0 "\n"; next }
    in_head = 0; body = body "  " $0 "\n"
  }' "$readme"
count=$(ls "$scratch/src" | wc -l)
[[ $count -gt 0 ]] || { echo "FAIL: no C++ snippet found in $readme" >&2; exit 1; }
# Unoptimised (-O0): the snippets are compiled and linked, never run.
if ! "$(dirname "$0")/../support/build_programs.sh" "$scratch" readme_snippets -O0; then
  echo "FAIL: README.md snippets that do not compile (snippet_<line>: its first line in README.md); sources in $scratch/src" >&2
  exit 1
fi
echo "PASS: the $count C++ snippets of README.md compile and link as shown"
