#!/usr/bin/env bash
# Checkpoints need one directory that all ranks share. With node-local disks (2
# simulated hosts x 2 ranks, each host with its own disk at --out), dtr-train
# refuses at start (exit 2), naming the ranks and the host that do not see rank
# 0's files, and trains nothing; with --out on the shared filesystem the same job
# saves its checkpoint.
#   local_disks_test.sh DTR_TRAIN OUT_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
train=$1 out=$2
rm -rf "$out"
mkdir -p "$out"
local_dir=$(mktemp -d /tmp/dtr_local_disks.XXXXXX)
trap 'rm -rf "$local_dir"' EXIT
common=(--model tiny --steps 2 --ckpt-every 2 --global-batch 8 --eval-every 0 --eval-batches 1 --sample-tokens 0
        --progress-bar off)
export DTR_CLUSTER_MIN_BYTES=0  # the refusal exchanges only a few bytes
rc=0
DTR_CLUSTER_ARGS="--local-dir $local_dir" "$here/../../tests/cluster/on_cluster.sh" 2 4 "$train" "${common[@]}" --out "$local_dir/run" \
  >"$out/local.log" 2>&1 || rc=$?
cat "$out/local.log"
[[ $rc -eq 77 ]] && exit 77
[[ $rc -ne 0 ]] || { echo "FAIL: dtr-train trained with --out on node-local disks" >&2; exit 1; }
grep -q "the directory $local_dir/run is not shared by all ranks: ranks 2, 3 (host dtrc[0-9]*h1) do not see the file that rank 0 (host dtrc[0-9]*h0) wrote there" "$out/local.log" ||
  { echo "FAIL: no error naming the ranks and host that do not share --out" >&2; exit 1; }
grep -q "step  *1/2" "$out/local.log" && { echo "FAIL: it trained before refusing" >&2; exit 1; }
"$here/../../tests/cluster/on_cluster.sh" 2 4 "$train" "${common[@]}" --out "$out/shared"
[[ -f $out/shared/checkpoints/step_2/metadata.json ]] || { echo "FAIL: no checkpoint with a shared --out" >&2; exit 1; }
echo "PASS: node-local --out refused at start naming ranks and host; a shared --out saves"
