#!/usr/bin/env bash
# Open MPI's remote-launch agent for the simulated cluster (plm_rsh_agent), in
# place of ssh: `launch_agent.sh HOST COMMAND...` runs COMMAND on HOST, i.e. in
# the host's network namespace (the one holding HOST's address, of the cluster
# in DTR_CLUSTER_NAME) and in a UTS namespace of its own whose hostname is the
# namespace's name, as a remote host would have.
set -euo pipefail
host=$1
shift
ns=""
for candidate in $(ip netns list | awk '{print $1}'); do
  [[ $candidate == "${DTR_CLUSTER_NAME:?launch_agent: DTR_CLUSTER_NAME is not set}h"* ]] || continue
  if ip -n "$candidate" -4 addr show dev eth0 2>/dev/null | grep -q "inet $host/"; then ns=$candidate; break; fi
done
[[ -n $ns ]] || { echo "launch_agent: no host $host in cluster $DTR_CLUSTER_NAME" >&2; exit 255; }
# Like ssh, run the command line through a shell.
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$1"; shift; exec sh -c "$*"' agent "$ns" "$@"
