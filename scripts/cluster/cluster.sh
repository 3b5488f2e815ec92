#!/usr/bin/env bash
# A simulated cluster on one Linux machine, for tests and benchmarks that cross
# hosts: each "host" is a network namespace with its own loopback and one
# interface (eth0) on a bridge, which lives in a namespace of its own (the
# switch), so nothing of the machine's own network changes. Links can be shaped
# per host with tc's token bucket (tbf), both ways. Needs root and iproute2.
#
#   scripts/cluster/cluster.sh run HOSTS [--rate RATE] -- COMMAND...
#       makes a cluster of HOSTS hosts, runs COMMAND (in the machine's own
#       namespaces) with DTR_CLUSTER_* describing it, and tears the cluster down
#       afterwards, also when COMMAND fails or the script gets SIGTERM, SIGINT or
#       SIGHUP (COMMAND is then sent SIGTERM). Its exit code is COMMAND's. A
#       cluster whose script was killed outright (kill -9) is removed by the next
#       run, which finds its owner gone.
#   scripts/cluster/cluster.sh sent [NAME]
#       bytes the hosts of cluster NAME (default: $DTR_CLUSTER_NAME) have sent
#       to the switch so far, summed over hosts (interface counters of eth0).
#   scripts/cluster/cluster.sh cleanup [NAME]
#       removes cluster NAME, or every cluster of this script, running or not.
#
# COMMAND sees:
#   DTR_CLUSTER_NAME      the cluster's prefix, e.g. dtrc3
#   DTR_CLUSTER_HOSTS     the hosts' addresses, space separated (10.213.3.11 ...)
#   DTR_CLUSTER_SUBNET    e.g. 10.213.3.0/24 (the only network between hosts)
#   DTR_CLUSTER_HOSTFILE  an Open MPI hostfile: each host with SLOTS slots
#                         (DTR_CLUSTER_SLOTS, default 2), in the cluster's state
#                         directory /run/dtr_cluster/NAME
#   DTR_CLUSTER_LOCAL_DIR --local-dir's DIR, or empty
#   DTR_CLUSTER_SWITCH    the switch namespace, which holds 10.213.N.1: run mpirun
#                         there (scripts/cluster/mpirun.sh does), so that every
#                         host is remote to it; its net.ipv4.tcp_retries2 is 5,
#                         so mpirun ends a job whose host dropped out in ~15 s
# Host i is namespace ${DTR_CLUSTER_NAME}h$i with address 10.213.N.(11+i) and
# hostname ${DTR_CLUSTER_NAME}h$i (each rank's processor name).
# RATE is a tc rate (10gbit, 1gbit, 100mbit): every host's link is shaped to it
# in both directions; unshaped by default (a veth pair: memory speed).
# --local-dir DIR gives each host a disk of its own at DIR, as node-local disks
# are: processes that launch_agent.sh starts on host i see their host's private
# directory there (a bind mount in a mount namespace of their own); everything
# else sees DIR as it is (DTR_CLUSTER_LOCAL_DIR).
set -euo pipefail

readonly prefix_base=dtrc
readonly state_root=/run/dtr_cluster
readonly lock=$state_root/lock

die() { echo "cluster: $*" >&2; exit 2; }

need_root() {
  [[ $(id -u) -eq 0 ]] || die "needs root (network namespaces); run as root or skip the cluster tests"
  command -v ip >/dev/null || die "needs iproute2 (ip); scripts/setup.sh --tests installs it"
  command -v tc >/dev/null || die "needs tc (iproute2)"
}

# Removes namespaces named like a cluster's; `name` empty: of every cluster.
remove_namespaces() {
  local name=$1 ns
  for ns in $(ip netns list | awk '{print $1}'); do
    if [[ -n $name && $ns == ${name}h* || -n $name && $ns == ${name}sw || -z $name && $ns =~ ^${prefix_base}[0-9]+(h[0-9]+|sw)$ ]]; then
      # Processes still inside (a rank that outlived its job) would keep nothing
      # alive, but end them so that no orphan is left.
      local pids
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      [[ -z $pids ]] || kill -9 $pids 2>/dev/null || true
      ip netns del "$ns" 2>/dev/null || true
    fi
  done
}

remove_cluster() {  # remove_cluster NAME
  remove_namespaces "$1"
  rm -rf "${state_root:?}/$1"
}

# Removes the clusters whose owning script is gone (killed outright).
remove_orphans() {
  local ns name owner
  for ns in $(ip netns list | awk '{print $1}'); do
    [[ $ns =~ ^(${prefix_base}[0-9]+)sw$ ]] || continue
    name=${BASH_REMATCH[1]}
    owner=$(cat "$state_root/$name/owner" 2>/dev/null || true)
    if [[ -z $owner ]] || ! kill -0 "$owner" 2>/dev/null; then
      echo "cluster: removing $name, left behind by a run that was killed" >&2
      remove_cluster "$name"
    fi
  done
}

# The first free cluster number (1..250). Called under the lock, so that
# concurrent runs differ.
claim_number() {
  local n
  for n in $(seq 1 250); do
    if ! ip netns list | awk '{print $1}' | grep -qx "${prefix_base}${n}sw"; then
      echo "$n"
      return
    fi
  done
  die "no free cluster number (250 clusters exist?); run: $0 cleanup"
}

shape() {  # shape NS DEV RATE
  # burst: at least rate/HZ; 1 MiB covers 10 Gbit/s at HZ=1000 with room.
  ip -n "$1" link set "$2" txqueuelen 1000
  tc -n "$1" qdisc add dev "$2" root tbf rate "$3" burst 1mb latency 100ms
}

cmd_run() {
  local hosts=$1 rate="" local_dir=""
  shift
  [[ $hosts =~ ^[0-9]+$ && $hosts -ge 1 && $hosts -le 32 ]] || die "HOSTS must be 1..32, got '$hosts'"
  while [[ $# -gt 0 && $1 != -- ]]; do
    case $1 in
      --rate) rate=$2; shift 2 ;;
      --local-dir) local_dir=$2; shift 2 ;;
      *) die "unknown option '$1'" ;;
    esac
  done
  [[ ${1:-} == -- ]] || die "usage: $0 run HOSTS [--rate RATE] [--local-dir DIR] -- COMMAND..."
  shift
  [[ $# -gt 0 ]] || die "no COMMAND after --"
  need_root

  local number sw subnet hostfile
  mkdir -p "$state_root"
  exec 9>"$lock"
  flock 9
  remove_orphans
  number=$(claim_number)
  cluster_name=${prefix_base}${number}  # global: the EXIT trap reads it
  local name=$cluster_name
  sw=${name}sw
  subnet=10.213.${number}.0/24
  trap 'remove_cluster "$cluster_name"' EXIT
  trap 'exit 143' TERM INT HUP
  mkdir -p "$state_root/$name"
  echo $$ >"$state_root/$name/owner"
  ip netns add "$sw"
  flock -u 9
  exec 9>&-
  ip -n "$sw" link set lo up
  # mpirun runs here. Open MPI 4.1's mpirun waits for a daemon it lost until TCP
  # gives up resending to it: about 15 minutes at Linux's default tcp_retries2
  # of 15, about 15 s at 5 (a launch node's setting; tests/mesh/host_dropout_test.sh).
  ip netns exec "$sw" sysctl -qw net.ipv4.tcp_retries2=5 2>/dev/null ||
    echo "cluster: could not set net.ipv4.tcp_retries2 in the switch namespace; mpirun may wait for a lost host" >&2
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" addr add "10.213.${number}.1/24" dev br0
  ip -n "$sw" link set br0 up
  hostfile=$state_root/$name/hostfile
  : >"$hostfile"
  local addrs=() i ns addr
  for ((i = 0; i < hosts; i++)); do
    ns=${name}h$i
    addr=10.213.${number}.$((11 + i))
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$sw" link add "h$i" type veth peer name eth0 netns "$ns"
    ip -n "$sw" link set "h$i" master br0 up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    if [[ -n $rate ]]; then
      shape "$ns" eth0 "$rate"   # host -> switch
      shape "$sw" "h$i" "$rate"  # switch -> host
    fi
    [[ -z $local_dir ]] || mkdir -p "$state_root/$name/local/h$i"
    echo "$addr slots=${DTR_CLUSTER_SLOTS:-2}" >>"$hostfile"
    addrs+=("$addr")
  done
  # In the background, so that a signal to this script is handled at once: the
  # trap ends COMMAND, then the EXIT trap removes the cluster.
  command_pid=""
  trap '[[ -z $command_pid ]] || { kill -TERM "$command_pid" 2>/dev/null; wait "$command_pid" || true; }; exit 143' \
    TERM INT HUP
  [[ -z $local_dir ]] || mkdir -p "$local_dir"
  DTR_CLUSTER_NAME=$name DTR_CLUSTER_HOSTS="${addrs[*]}" DTR_CLUSTER_SUBNET=$subnet \
    DTR_CLUSTER_HOSTFILE=$hostfile DTR_CLUSTER_SWITCH=$sw DTR_CLUSTER_LOCAL_DIR=$local_dir "$@" &
  command_pid=$!
  local rc=0
  wait "$command_pid" || rc=$?
  return "$rc"
}

cmd_sent() {
  local name=${1:-${DTR_CLUSTER_NAME:?sent: no cluster named and DTR_CLUSTER_NAME unset}} total=0 ns bytes
  for ns in $(ip netns list | awk '{print $1}'); do
    [[ $ns =~ ^${name}h[0-9]+$ ]] || continue
    # `ip -s -o`: one line, fields split by backslashes; the 6th holds the TX counters.
    bytes=$(ip -n "$ns" -s -o link show dev eth0 | awk -F'\\' '{split($6, f, " "); print f[1]}')
    total=$((total + bytes))
  done
  echo "$total"
}

case ${1:-} in
  run) shift; cmd_run "$@" ;;
  sent) shift; cmd_sent "$@" ;;
  cleanup)
    need_root
    if [[ -n ${2:-} ]]; then
      remove_cluster "$2"
    else
      remove_namespaces ""
      rm -rf "${state_root:?}"/${prefix_base}[0-9]*
    fi
    ;;
  *) die "usage: $0 run HOSTS [--rate RATE] -- COMMAND... | $0 sent [NAME] | $0 cleanup" ;;
esac
