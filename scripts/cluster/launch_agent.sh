#!/usr/bin/env bash
# Open MPI's remote-launch agent for the simulated cluster (plm_rsh_agent), in
# place of ssh: `launch_agent.sh HOST COMMAND...` runs COMMAND on HOST, i.e. in
# the host's network namespace (the one holding HOST's address, of the cluster
# in DTR_CLUSTER_NAME) and in a UTS namespace of its own whose hostname is the
# namespace's name, as a remote host would have, and in a mount namespace of
# its own (with --local-dir, the host's private disk is mounted there).
set -euo pipefail
host=$1
shift
ns=""
for candidate in $(ip netns list | awk '{print $1}'); do
  [[ $candidate == "${DTR_CLUSTER_NAME:?launch_agent: DTR_CLUSTER_NAME is not set}h"* ]] || continue
  if ip -n "$candidate" -4 addr show dev eth0 2>/dev/null | grep -q "inet $host/"; then ns=$candidate; break; fi
done
[[ -n $ns ]] || { echo "launch_agent: no host $host in cluster $DTR_CLUSTER_NAME" >&2; exit 255; }
# Like ssh, run the command line through a shell. With node-local disks
# (DTR_CLUSTER_LOCAL_DIR), a mount namespace shows this host's own directory there.
local_dir=${DTR_CLUSTER_LOCAL_DIR:-}
own_dir=""
[[ -z $local_dir ]] || own_dir=/run/dtr_cluster/$DTR_CLUSTER_NAME/local/${ns#"$DTR_CLUSTER_NAME"}
exec ip netns exec "$ns" unshare --uts --mount sh -c '
  hostname "$1"
  [ -z "$2" ] || mount --bind "$3" "$2"
  shift 3
  exec sh -c "$*"' agent "$ns" "$local_dir" "$own_dir" "$@"
