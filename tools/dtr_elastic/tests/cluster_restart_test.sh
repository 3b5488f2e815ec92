#!/usr/bin/env bash
# dtr-elastic on the simulated cluster (scripts/cluster/): dtr-train with the
# tiny model on 2 hosts x 2 ranks, a checkpoint every 5 of 40 steps; once step
# 17 is logged, host 1's link goes down. The collective timeout (4 s) ends the
# ranks, mpirun ends once TCP gives up on host 1's daemon, and dtr-elastic must
# relaunch on host 0's 2 ranks from the newest checkpoint (step_15, or a later
# one when a loaded machine let the job run on before the cut took hold) and
# finish the run. Its losses after the restart must equal those of the same
# checkpoint resumed at 2 ranks by plain mpirun (a run that went 4 ranks ->
# step_15 -> 2 ranks), to 1e-5 relative; the restart line must name the host, the
# checkpoint and the steps redone. Prints the seconds from the cut to the first
# step after the restart. Skips (77) where network namespaces cannot be made.
#   cluster_restart_test.sh DTR_ELASTIC DTR_TRAIN WORK_DIR MPIEXEC [MPIRUN_FLAGS...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
if [[ ${1:-} == --inside ]]; then
  elastic=$2 train=$3 work=$4
  out=$work/run
  common=(--model tiny --seq-len 256 --steps 40 --global-batch 16 --eval-every 0 --eval-batches 1 --log-every 1
          --sample-tokens 0 --progress-bar off --no-final-checkpoint --ckpt-every 5)
  DTR_COLLECTIVE_TIMEOUT=4 "$elastic" --hostfile "$DTR_CLUSTER_HOSTFILE" --max-restarts 2 --grace 1 \
    --launcher "$repo/scripts/cluster/mpirun.sh" -- "$train" "${common[@]}" --out "$out" \
    >"$work/elastic.out" 2>"$work/elastic.err" &
  supervisor=$!
  metrics=$out/metrics.jsonl
  last_step() { sed -nE 's/.*"step":([0-9]+).*/\1/p' "$metrics" 2>/dev/null | tail -1; }
  for _ in $(seq 3000); do [[ $(last_step) -ge 17 ]] 2>/dev/null && break; sleep 0.02; done
  [[ $(last_step) -ge 17 ]] || { cat "$work/elastic.err"; fail "the job did not reach step 17"; }
  inode=$(stat -c %i "$metrics")
  ip -n "${DTR_CLUSTER_NAME}h1" link set eth0 down
  cut=$(date +%s.%N)
  echo "cluster: host 1's link down after step $(last_step)"
  # The restart rewrites metrics.jsonl (a new file: its rows up to the checkpoint's
  # step), then logs the next step.
  first_step=""
  for _ in $(seq 1800); do
    resumed=$(sed -nE 's/.*checkpoint: .*step_([0-9]+) \|.*/\1/p' "$out/elastic/restarts.log" 2>/dev/null | head -1)
    if [[ -n $resumed && $(stat -c %i "$metrics" 2>/dev/null) != "$inode" ]] &&
      grep -q "\"step\":$((resumed + 1))[,}]" "$metrics" 2>/dev/null; then
      first_step=$(date +%s.%N)
      break
    fi
    kill -0 "$supervisor" 2>/dev/null || break
    sleep 0.1
  done
  rc=0
  wait "$supervisor" || rc=$?
  grep -v '^\[' "$work/elastic.err" | grep -E "dtr-elastic|error" || true
  [[ $rc -eq 0 ]] || { tail -30 "$work/elastic.err"; fail "dtr-elastic exited $rc"; }
  [[ -n $first_step ]] || fail "no step after the restart was seen"
  log=$out/elastic/restarts.log
  grep -qE "restart 1 of at most 2 .*hosts dropped: [^|]*\|.*checkpoint: $out/checkpoints/step_(15|20|25) \| steps redone: [0-9]+" "$log" ||
    { cat "$log"; fail "the restart line does not name the dropped host, the checkpoint and the steps redone"; }
  grep -q "attempt 2: 2 rank(s)" "$log" || { cat "$log"; fail "the restart did not run 2 ranks on host 0"; }
  grep -q "done: attempt 2 ended with exit status 0" "$log" || { cat "$log"; fail "the run did not finish"; }
  awk -v a="$cut" -v b="$first_step" 'BEGIN { printf "cluster: %.1f s from the cut to the first step after the restart\n", b - a }'
  exit 0
fi

elastic=$1 train=$2 work=$3 mpiexec=$4
shift 4
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! ip netns add "dtrprobe$$" 2>/dev/null; then
  echo "skipped: network namespaces cannot be made here (needs root and iproute2)"
  exit 77
fi
ip netns del "dtrprobe$$"
rm -rf "$work"
mkdir -p "$work"
"$repo/scripts/cluster/cluster.sh" run 2 -- "$0" --inside "$elastic" "$train" "$work"

# The reference: the same checkpoint resumed at 2 ranks on one host.
out=$work/run
step=$(sed -nE 's/.*checkpoint: .*step_([0-9]+) \|.*/\1/p' "$out/elastic/restarts.log" | head -1)
mkdir -p "$work/reference"
cp -r "$out/checkpoints/step_$step" "$work/reference/step_$step"
"$mpiexec" "$@" -np 2 "$train" --model tiny --seq-len 256 --steps 40 --global-batch 16 --eval-every 0 --eval-batches 1 \
  --log-every 10 --sample-tokens 0 --progress-bar off --no-final-checkpoint \
  --resume "$work/reference/step_$step" --out "$work/reference/run" >/dev/null
losses() { sed -nE 's/.*"loss":([^,}]*).*"step":([0-9]+).*/\2 \1/p' "$1" | awk -v from="$step" '$1 > from'; }
paste -d' ' <(losses "$out/metrics.jsonl") <(losses "$work/reference/run/metrics.jsonl") | awk -v from="$step" '
  { n++; d = $2 - $4; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > max) max = r
    if ($1 != $3 || r > 1e-5) bad = bad " step " $1 ": " $2 " vs " $4 }
  END { printf "steps %d-40 after the restart against 4 ranks -> step_%d -> 2 ranks: largest relative difference %.2e over %d steps\n", from + 1, from, max, n
        if (n != 40 - from || bad != "") { print "FAIL:" bad > "/dev/stderr"; exit 1 } }'
echo "PASS: dtr-elastic restarted on host 0's 2 ranks from step_$step after host 1 dropped out, and the run finished with the losses of a 4 -> 2 rank resume"
