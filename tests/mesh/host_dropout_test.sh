#!/usr/bin/env bash
# A host that drops out mid-job (its link set down) ends the job's ranks within
# the collective timeout: across 2 simulated hosts x 2 ranks all-reducing in a
# loop, host 1's link goes down; every rank process on both hosts must be gone
# within DTR_COLLECTIVE_TIMEOUT plus the heartbeat window and a margin, and the
# ranks of host 0 must name ranks 2 and 3 and host 1 as the ones that did not
# answer. (Host 1's ranks report the same of host 0, but their output travels
# over the cut link and is lost.) mpirun must then end by itself too: it waits
# for the daemon it lost until TCP gives up resending to it, which the cluster's
# tcp_retries2 of 5 bounds (scripts/cluster/cluster.sh).
#   host_dropout_test.sh COLLECTIVE_FAULT_PROBE
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
if [[ ${1:-} == --inside ]]; then
  probe=$2 log=$3
  timeout=4
  DTR_COLLECTIVE_TIMEOUT=$timeout "$repo/scripts/cluster/mpirun.sh" -np 4 "$probe" loop >"$log" 2>&1 &
  mpirun_pid=$!
  for _ in $(seq 300); do grep -q looping "$log" && break; sleep 0.1; done
  grep -q looping "$log" || { cat "$log"; echo "FAIL: the job did not start" >&2; exit 1; }
  ip -n "${DTR_CLUSTER_NAME}h1" link set eth0 down
  start=$(date +%s%N)
  ranks_left() {
    local h pids
    for h in h0 h1; do
      pids=$(ip netns pids "${DTR_CLUSTER_NAME}$h" | xargs -r ps -o comm= -p 2>/dev/null || true)
      grep -c collective_faul <<<"$pids" || true
    done | paste -sd+ | bc
  }
  # The timeout, the heartbeat window (1 s at this timeout) and a margin for a loaded machine.
  limit_ms=$(((timeout + 1 + 15) * 1000))
  while [[ $(ranks_left) -gt 0 ]]; do
    elapsed_ms=$((($(date +%s%N) - start) / 1000000))
    if [[ $elapsed_ms -gt $limit_ms ]]; then
      cat "$log"
      echo "FAIL: $(ranks_left) rank processes still run $elapsed_ms ms after host 1 dropped out" >&2
      exit 1
    fi
    sleep 0.2
  done
  elapsed_ms=$((($(date +%s%N) - start) / 1000000))
  # TCP's resending at tcp_retries2=5 (about 13 s after the ranks end) and a margin.
  mpirun_limit_ms=$((limit_ms + 25000))
  retries=$(ip netns exec "$DTR_CLUSTER_SWITCH" sysctl -n net.ipv4.tcp_retries2)
  how="by itself"
  if [[ $retries != 5 ]]; then
    how="killed by the test"
    echo "cluster: tcp_retries2 is $retries in mpirun's namespace (could not be set), so mpirun waits for host 1's daemon: ending it"
    kill -KILL "$mpirun_pid"
  fi
  while kill -0 "$mpirun_pid" 2>/dev/null; do
    if [[ $((($(date +%s%N) - start) / 1000000)) -gt $mpirun_limit_ms ]]; then
      kill -KILL "$mpirun_pid"
      cat "$log"
      echo "FAIL: mpirun still ran $mpirun_limit_ms ms after host 1 dropped out, every rank gone" >&2
      exit 1
    fi
    sleep 0.2
  done
  mpirun_ms=$((($(date +%s%N) - start) / 1000000))
  wait "$mpirun_pid" 2>/dev/null || true
  cat "$log"
  for r in 0 1; do
    grep -q "\[dtr rank $r\] \[error\] collective timed out: .*ranks 2, 3 (host ${DTR_CLUSTER_NAME}h1) sent no heartbeat" "$log" ||
      { echo "FAIL: rank $r did not name ranks 2, 3 on host 1 as unreachable" >&2; exit 1; }
  done
  echo "PASS: all ranks ended ${elapsed_ms} ms and mpirun ${mpirun_ms} ms ($how) after host 1 dropped out (timeout ${timeout} s); host 0's ranks named host 1's"
  exit 0
fi
probe=$1
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! ip netns add "dtrprobe$$" 2>/dev/null; then
  echo "skipped: network namespaces cannot be made here (needs root and iproute2)"
  exit 77
fi
ip netns del "dtrprobe$$"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$repo/scripts/cluster/cluster.sh" run 2 -- "$0" --inside "$probe" "$log"
