#!/usr/bin/env bash
# mpirun across the hosts of a simulated cluster (scripts/cluster/cluster.sh run
# sets the DTR_CLUSTER_* variables this reads): Open MPI starts from the switch
# namespace, launches one daemon per host through launch_agent.sh (in place of
# ssh), fills each host's slots in turn (ranks 0,1 on host 0, ...), and connects
# ranks on different hosts over TCP on the cluster's subnet only, ranks on one
# host through shared memory. Every DTR_* variable reaches the ranks. A
# --hostfile among the arguments replaces the cluster's (a job on some of its
# hosts, as dtr-elastic runs one after dropping a host).
#   scripts/cluster/mpirun.sh [--hostfile FILE] -np 4 PROGRAM ARGS...
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
: "${DTR_CLUSTER_SWITCH:?run under scripts/cluster/cluster.sh run}"
hostfile=(--hostfile "$DTR_CLUSTER_HOSTFILE")
if [[ " $* " == *" --hostfile "* ]]; then hostfile=(); fi
flags=("${hostfile[@]}" --bind-to none --oversubscribe
       --mca plm_rsh_agent "$here/launch_agent.sh" --mca plm_rsh_no_tree_spawn 1
       --mca btl tcp,vader,self --mca btl_tcp_if_include "$DTR_CLUSTER_SUBNET"
       --mca oob_tcp_if_include "$DTR_CLUSTER_SUBNET")
[[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
for var in $(compgen -e); do
  [[ $var == DTR_* ]] && flags+=(-x "$var")
done
exec ip netns exec "$DTR_CLUSTER_SWITCH" mpirun "${flags[@]}" "$@"
