#!/usr/bin/env bash
# A stand-in for mpirun in supervisor_test.sh: dtr-elastic runs it as
# `fake_launcher.sh --hostfile FILE -np N PROGRAM ARGS...`. It records each call
# (one line in $FAKE_DIR/calls: np, the hostfile's hosts, the program's arguments)
# and then plays the call's line of $FAKE_DIR/plan (line k for the k-th call):
#   STATUS|SECONDS|TEXT  touch $FAKE_DIR/out/metrics.jsonl if it exists (progress),
#                        sleep SECONDS, print TEXT to stderr (printf %b: \n makes
#                        lines), exit STATUS
#   wait|0|              wait for SIGTERM, then record "got TERM" and exit 0 (as
#                        dtr-train does after saving a checkpoint)
#   hang|0|TEXT          print TEXT, then wait for SIGTERM, record "got TERM" and
#                        exit 143 (as mpirun waiting for a lost host's daemon)
set -euo pipefail
[[ ${1:-} == --hostfile && ${3:-} == -np && $# -ge 5 ]] ||
  { echo "fake_launcher: expected --hostfile FILE -np N PROGRAM ARGS..., got: $*" >&2; exit 99; }
hostfile=$2 np=$4
shift 4
hosts=$(awk '{ print $1 }' "$hostfile" | paste -sd, -)
echo "np=$np hosts=$hosts args=$*" >>"$FAKE_DIR/calls"
call=$(grep -c "^np=" "$FAKE_DIR/calls")
plan=$(sed -n "${call}p" "$FAKE_DIR/plan")
[[ -n $plan ]] || { echo "fake_launcher: the plan has no line $call" >&2; exit 98; }
IFS='|' read -r status seconds text <<<"$plan"
if [[ $status == hang ]]; then
  printf '%b\n' "$text" >&2
  trap 'echo "got TERM" >>"$FAKE_DIR/calls"; exit 143' TERM
  while :; do sleep 0.1; done
fi
if [[ $status == wait ]]; then
  trap 'echo "got TERM" >>"$FAKE_DIR/calls"; exit 0' TERM
  echo "waiting" >"$FAKE_DIR/running"
  while :; do sleep 0.1; done
fi
[[ ! -f $FAKE_DIR/out/metrics.jsonl ]] || touch "$FAKE_DIR/out/metrics.jsonl"
sleep "$seconds"
[[ -z $text ]] || printf '%b\n' "$text" >&2
exit "$status"
