#!/usr/bin/env bash
# Kills a checkpoint save (SIGKILL to one rank) at each of its phases, saved
# synchronously and asynchronously (dtr/checkpoint/async_save.h), and checks that
# the previous checkpoint still loads, at the same and at another world size.
# Arguments: the probe, then the mpirun command prefix (mpirun and its flags,
# without -np).
set -uo pipefail
probe=$1
shift
# A killed rank ends the job: mpirun need not wait its default second before it
# SIGKILLs the other ranks (they hold no state to save).
export OMPI_MCA_odls_base_sigkill_timeout=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for mode in save async-save; do
  phases="writing written committing"
  [[ $mode == async-save ]] && phases="staged $phases"
  for phase in $phases; do
    dir=$work/$mode-$phase/ckpt
    mkdir -p "$(dirname "$dir")"
    timeout -k 5 60 "$@" -np 2 "$probe" "$mode" "$dir" "$phase" >"$dir.save.log" 2>&1 </dev/null
    status=$?
    if [[ $status -eq 0 || $status -eq 3 || $status -eq 124 ]]; then
      cat "$dir.save.log"
      echo "FAIL: $mode killed at $phase: the job was expected to die by SIGKILL, exit status $status" >&2
      exit 1
    fi
    [[ -d "$dir.tmp" ]] || { echo "FAIL: $mode killed at $phase left no staging directory $dir.tmp" >&2; exit 1; }
    for np in 2 1; do  # the same and a different world size
      timeout -k 5 60 "$@" -np $np "$probe" check "$dir" </dev/null ||
        { echo "FAIL: $mode killed at $phase: load at $np ranks" >&2; exit 1; }
    done
    echo "PASS: $mode killed at $phase (status $status) left the previous checkpoint loadable"
  done
done
