#!/usr/bin/env bash
# CTest entry of a `cluster` test: runs PROGRAM under mpirun with NP ranks across
# HOSTS simulated hosts (scripts/cluster/: network namespaces on a bridge, the
# ranks filling each host's slots in turn), then requires that the job sent data
# between the hosts (DTR_CLUSTER_MIN_BYTES, default 100000), so that a run which
# never left one host cannot pass.
# Skips (exit 77, with the reason) where network namespaces cannot be made.
#   on_cluster.sh HOSTS NP PROGRAM ARGS...
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
if [[ ${1:-} == --inside ]]; then
  shift
  np=$1
  shift
  before=$("$repo/scripts/cluster/cluster.sh" sent)
  "$repo/scripts/cluster/mpirun.sh" -np "$np" "$@"
  sent=$(($("$repo/scripts/cluster/cluster.sh" sent) - before))
  echo "cluster: the hosts sent $sent bytes"
  # Open MPI's own start-up and wire-up alone are a few kilobytes.
  if [[ $(wc -w <<<"$DTR_CLUSTER_HOSTS") -gt 1 && $sent -lt ${DTR_CLUSTER_MIN_BYTES:-100000} ]]; then
    echo "cluster: only $sent bytes crossed between hosts: the job did not run across them" >&2
    exit 1
  fi
  exit 0
fi
hosts=$1
shift
if [[ $(id -u) -ne 0 ]]; then
  echo "skipped: the cluster tests make network namespaces, which needs root"
  exit 77
fi
if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  echo "skipped: iproute2 (ip, tc) is missing; scripts/setup.sh --tests installs it"
  exit 77
fi
probe=dtrprobe$$
if ! error=$(ip netns add "$probe" 2>&1); then
  echo "skipped: this machine does not allow network namespaces: $error"
  exit 77
fi
ip netns del "$probe"
# DTR_CLUSTER_ARGS: more options of cluster.sh run (e.g. --local-dir DIR).
# shellcheck disable=SC2086
exec "$repo/scripts/cluster/cluster.sh" run "$hosts" ${DTR_CLUSTER_ARGS:-} -- "$0" --inside "$@"
