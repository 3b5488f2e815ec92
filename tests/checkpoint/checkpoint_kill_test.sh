#!/usr/bin/env bash
# Kills a checkpoint save (SIGKILL, just before its commit) and checks that the
# previous checkpoint still loads. Arguments: the probe, then the mpirun command
# prefix (mpirun and its flags, without -np).
set -uo pipefail
probe=$1
shift
dir=$(mktemp -d)/ckpt
trap 'rm -rf "$(dirname "$dir")"' EXIT
timeout -k 5 60 "$@" -np 2 "$probe" save "$dir" >"$dir.save.log" 2>&1 </dev/null
status=$?
if [[ $status -eq 0 || $status -eq 3 || $status -eq 124 ]]; then
  cat "$dir.save.log"
  echo "FAIL: the save job was expected to die by SIGKILL, exit status $status" >&2
  exit 1
fi
[[ -d "$dir.tmp" ]] || { echo "FAIL: the killed save left no staging directory $dir.tmp" >&2; exit 1; }
for np in 2 1; do  # the same and a different world size
  timeout -k 5 60 "$@" -np $np "$probe" check "$dir" </dev/null || { echo "FAIL: load at $np ranks" >&2; exit 1; }
done
echo "PASS: killed save (status $status) left the previous checkpoint loadable"
