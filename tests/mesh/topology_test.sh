#!/usr/bin/env bash
# What the ranks learn about their hosts, across 2 simulated hosts x 2 ranks:
# placed in blocks (mpirun's default with a hostfile) the hosts, their names and
# init_hsdp_mesh match the placement; dealt round-robin (--map-by node),
# init_hsdp_mesh refuses and a (2, 2) mesh, whose shard groups then span hosts,
# gets the warning that says why it will be slow.
#   topology_test.sh TOPOLOGY_PROBE
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
probe=$1
# The probe exchanges only a few bytes; the host names show that it crossed hosts.
export DTR_CLUSTER_MIN_BYTES=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$here/../cluster/on_cluster.sh" 2 4 "$probe" 2 blocks
rc=0
"$here/../cluster/on_cluster.sh" 2 4 --map-by node "$probe" 2 round-robin >"$out" 2>&1 || rc=$?
cat "$out"
[[ $rc -eq 77 ]] && exit 77
[[ $rc -eq 0 ]] || { echo "FAIL: the round-robin run failed (exit $rc)" >&2; exit 1; }
grep -q "groups of mesh dim 'shard' (size 2) span hosts" "$out" ||
  { echo "FAIL: no warning about a mesh whose shard groups span hosts" >&2; exit 1; }
echo "PASS: hosts learned as placed; HSDP mesh within hosts; round-robin refused and warned about"
