#!/usr/bin/env bash
# Builds and runs every program of the guide (docs/guide/*.md) as a user would, and
# checks that it prints what the guide says it prints.
#
# In a guide page, each ```cpp block is a complete program; the ```text block that
# follows it (before the next ```cpp block) is its output. Each program is built
# against the installed package (find_package(dtr)), run under mpirun at 2 ranks in
# a directory of its own, and its standard output is compared with that text, line
# by line: words must be equal and numbers equal to 1e-3 relative (the last digits
# of a loss move with the CPU's vector width). A program without an output block,
# an output block without a program, a failed build or run, or a different output
# fails the test, naming the page and the line of the program.
# Usage: check_guide.sh <guide dir> <dtr build dir> <scratch dir> <mpirun> [mpirun flags...]
set -euo pipefail
guide=$1 build=$2 scratch=$3
shift 3
mpirun=("$@")
rm -rf "$scratch" && mkdir -p "$scratch/src" "$scratch/expected" "$scratch/run"
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null

# <page>_<line>.cpp and <page>_<line>.txt for each program, <line> its first line.
for page in "$guide"/*.md; do
  name=$(basename "$page" .md | tr -c 'a-zA-Z0-9\n' '_')
  awk -v src="$scratch/src" -v outdir="$scratch/expected" -v page="$name" -v path="$page" '
    function fail(msg) { printf "FAIL: %s:%d: %s\n", path, NR, msg > "/dev/stderr"; bad = 1; exit 1 }
    /^```cpp/ {
      if (pending) fail("the program at line " pending " has no ```text block of its output after it")
      kind = "cpp"; start = NR + 1; pending = start; file = src "/" page "_" start ".cpp"
      printf "" > file; next
    }
    /^```text/ {
      if (!pending) fail("an output block with no program before it")
      kind = "text"; file = outdir "/" page "_" pending ".txt"; printf "" > file; pending = 0; next
    }
    /^```/ && kind != "" { close(file); kind = ""; next }
    kind != "" { print > file }
    END { if (!bad && pending) { printf "FAIL: %s: the program at line %d has no output block\n", path, pending > "/dev/stderr"; exit 1 } }
  ' "$page"
done
count=$(ls "$scratch/src" | wc -l)
[[ $count -gt 0 ]] || { echo "FAIL: no program found in $guide/*.md" >&2; exit 1; }

# Unoptimised: the programs are small; compile time dominates.
if ! "$(dirname "$0")/../support/build_programs.sh" "$scratch" guide_programs "-O0 -Wall -Wextra -Werror"; then
  echo "FAIL: guide programs that do not compile (<page>_<line>: the page and the program's first line); sources in $scratch/src" >&2
  exit 1
fi

# Lines of `got` and `want` agree: the same words, numbers within 1e-3 relative.
same_output() {
  awk 'function isnum(s) { return s ~ /^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$/ }
    NR == FNR { want[FNR] = $0; n = FNR; next }
    {
      got_n = FNR
      if (FNR > n) { printf "  extra line %d: %s\n", FNR, $0; bad = 1; next }
      a = $0; b = want[FNR]
      gsub(/[,;:()\[\]=]/, " & ", a); gsub(/[,;:()\[\]=]/, " & ", b)
      na = split(a, x, " "); nb = split(b, y, " ")
      ok = (na == nb)
      for (i = 1; ok && i <= na; ++i) {
        if (isnum(x[i]) && isnum(y[i])) {
          d = x[i] - y[i]; if (d < 0) d = -d
          s = y[i] < 0 ? -y[i] : y[i]
          if (d > 1e-3 * s + 1e-9) ok = 0
        } else if (x[i] != y[i]) ok = 0
      }
      if (!ok) { printf "  line %d\n    guide: %s\n    run:   %s\n", FNR, want[FNR], $0; bad = 1 }
    }
    END { if (got_n < n) { printf "  missing line %d: %s\n", got_n + 1, want[got_n + 1]; bad = 1 } exit bad }' "$2" "$1"
}

failed=0
for f in "$scratch"/src/*.cpp; do
  name=$(basename "$f" .cpp)
  dir="$scratch/run/$name" && mkdir -p "$dir"
  if ! (cd "$dir" && timeout 300 "${mpirun[@]}" -np 2 "$scratch/build/$name" >"$dir/stdout" 2>"$dir/stderr"); then
    echo "FAIL: $name exited with an error; its output:" >&2
    tail -20 "$dir/stdout" "$dir/stderr" >&2
    failed=1
    continue
  fi
  if ! same_output "$dir/stdout" "$scratch/expected/$name.txt"; then
    echo "FAIL: $name (its page and first line) printed other than the guide shows" >&2
    failed=1
  fi
done
[[ $failed -eq 0 ]] || exit 1
echo "PASS: the $count programs of the guide build, run at 2 ranks and print what the guide shows"
