#!/usr/bin/env bash
# The simulated cluster (scripts/cluster/cluster.sh) never outlives its run:
# its namespaces are gone after a command that fails, after SIGTERM to the
# script (the command is ended too), and a cluster whose script was killed with
# SIGKILL is removed by the next run, which works. Skips (77) where namespaces
# cannot be made.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cluster=$repo/scripts/cluster/cluster.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! ip netns add "dtrprobe$$" 2>/dev/null; then
  echo "skipped: network namespaces cannot be made here (needs root and iproute2)"
  exit 77
fi
ip netns del "dtrprobe$$"

namespaces_of() { ip netns list | awk '{print $1}' | grep -E "^$1(h[0-9]+|sw)$" || true; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# A failing command: its exit code comes back, and nothing is left.
rc=0
"$cluster" run 3 -- sh -c 'echo "$DTR_CLUSTER_NAME" >"$0"; ip netns list >"$0.during"; exit 7' "$work/name" || rc=$?
name=$(cat "$work/name")
[[ $rc -eq 7 ]] || fail "exit code $rc, expected the command's 7"
[[ $(grep -cE "^${name}(h[0-9]+|sw)( |$)" "$work/name.during") -eq 4 ]] || fail "cluster $name did not have 3 hosts and a switch while running"
[[ -z $(namespaces_of "$name") ]] || fail "cluster $name left namespaces after a failing command: $(namespaces_of "$name")"
[[ ! -e /run/dtr_cluster/$name ]] || fail "cluster $name left its state directory"

# SIGTERM to the script: the command gets SIGTERM, the cluster goes.
"$cluster" run 2 -- sh -c 'echo "$DTR_CLUSTER_NAME" >"$0"; trap "kill \$! 2>/dev/null; echo ended >$0.ended; exit 1" TERM; sleep 60 & wait' "$work/name2" &
script=$!
for _ in $(seq 100); do [[ -s $work/name2 ]] && break; sleep 0.1; done
name=$(cat "$work/name2")
kill -TERM "$script"
rc=0
wait "$script" || rc=$?
[[ $rc -eq 143 ]] || fail "after SIGTERM the script exited $rc, expected 143"
[[ -f $work/name2.ended ]] || fail "the command did not get SIGTERM"
[[ -z $(namespaces_of "$name") ]] || fail "cluster $name left namespaces after SIGTERM: $(namespaces_of "$name")"

# SIGKILL to the script leaves the cluster behind; the next run removes it and works.
"$cluster" run 2 -- sh -c 'echo $$ >"$0.pid"; echo "$DTR_CLUSTER_NAME" >"$0"; exec sleep 60' "$work/name3" &
script=$!
for _ in $(seq 100); do [[ -s $work/name3 ]] && break; sleep 0.1; done
killed=$(cat "$work/name3")
kill -KILL "$script"
wait "$script" 2>/dev/null || true
kill -KILL "$(cat "$work/name3.pid")" 2>/dev/null || true
[[ -n $(namespaces_of "$killed") ]] || fail "cluster $killed vanished after SIGKILL: nothing left to test"
"$cluster" run 2 -- sh -c 'ip netns exec "${DTR_CLUSTER_NAME}h0" true' || fail "a run after a killed one failed"
[[ -z $(namespaces_of "$killed") ]] || fail "the next run did not remove cluster $killed, left by a killed run"
echo "PASS: no namespace outlives its cluster run (failing command, SIGTERM, SIGKILL then a new run)"
