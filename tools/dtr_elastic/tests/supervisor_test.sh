#!/usr/bin/env bash
# dtr-elastic's decisions, without MPI: fake_launcher.sh stands in for mpirun and
# plays, call after call, what a job printed and its exit status. Checked: a host
# that the collective timeout names unreachable is dropped (by name, or by its
# ranks when the hostfile lists addresses) and the job resumes from the newest
# complete checkpoint (numerically newest; *.tmp and directories without
# metadata.json skipped; else the job's own --resume); a launcher still running
# --grace seconds after the job named lost ranks is terminated; mpirun's lost daemon drops
# its host; a rank lost on a host that answers restarts on the same hosts; exit
# status 2, a non-finite loss and other errors are not restarted; --max-restarts;
# no checkpoint and no host left stop with a reason; the restart line holds every
# field; SIGTERM reaches the job and stops the supervision; bad usage exits 2.
#   supervisor_test.sh DTR_ELASTIC SCRATCH_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
supervisor=$1 scratch=$2
fake=$here/fake_launcher.sh
rm -rf "$scratch"
mkdir -p "$scratch"

fail() {
  echo "FAIL ($case_name): $*" >&2
  for f in "$d/calls" "$d/stderr" "$d/restarts.log"; do
    [[ ! -f $f ]] || { echo "--- $f" >&2; cat "$f" >&2; }
  done
  exit 1
}

# new_case NAME HOSTFILE_TEXT: a fresh directory $d with the hostfile and an empty plan.
new_case() {
  case_name=$1
  d=$scratch/$1
  mkdir -p "$d/out"
  printf '%b' "$2" >"$d/hosts"
  : >"$d/plan"
}
plan() { printf '%s\n' "$1" >>"$d/plan"; }
# checkpoint NAME [incomplete]: a checkpoint directory under $d/out/checkpoints.
checkpoint() {
  mkdir -p "$d/out/checkpoints/$1"
  echo x >"$d/out/checkpoints/$1/rank_0.bin"
  [[ ${2:-} == incomplete ]] || echo '{}' >"$d/out/checkpoints/$1/metadata.json"
}
# metrics LAST: rows for steps 1..LAST, each taking 0.5 s.
metrics() {
  local s
  for ((s = 1; s <= $1; s++)); do
    echo "{\"elapsed_seconds\":$((s / 2)).$((s % 2 * 5)),\"loss\":3.5,\"step\":$s,\"step_seconds\":0.5,\"tokens\":512}"
  done >"$d/out/metrics.jsonl"
}
# supervise ARGS...: runs dtr-elastic with the fake launcher; sets `rc`.
supervise() {
  rc=0
  FAKE_DIR=$d "$supervisor" --hostfile "$d/hosts" --launcher "$fake" --log "$d/restarts.log" "$@" \
    >"$d/stdout" 2>"$d/stderr" || rc=$?
}
expect_rc() { [[ $rc -eq $1 ]] || fail "expected exit status $1, got $rc"; }
expect_calls() {  # expect_calls LINE...: the launcher's calls, exactly
  local want
  want=$(printf '%s\n' "$@")
  [[ $(cat "$d/calls") == "$want" ]] || fail "the launcher's calls differ; expected:
$want"
}
expect_log() {  # expect_log FIXED_TEXT: in stderr and in the log
  grep -qF -- "$1" "$d/stderr" || fail "stderr lacks: $1"
  grep -qF -- "$1" "$d/restarts.log" || fail "the log lacks: $1"
}

timeout_message() {  # timeout_message SILENT ANSWERED: one rank's collective-timeout line
  echo "[dtr rank 0] [error] collective timed out: all_gather #157 f32 [50240] -> [200960] (9 tensors coalesced) on 'dp of mesh (cpu, (dp=4))' (mpi, rank 0 of 4) still pending after 4.1 s (DTR_COLLECTIVE_TIMEOUT=4.0 s); a rank that died, hangs, is unreachable or issued different collectives on this group; $1 sent no heartbeat within 1.0 s: unreachable, dead or hung; $2 did; ending the process"
}

# ---- a host lost: dropped by name, resumed from the newest complete checkpoint ----
new_case lost_host '# two hosts\nnodea slots=2\nnodeb slots=2 max_slots=4  # the second\n\n'
checkpoint step_3
checkpoint step_5
checkpoint step_15
checkpoint step_20.tmp             # a save in progress, metadata.json already in it
checkpoint step_25 incomplete      # no metadata.json
metrics 17
out=$d/out
plan "1|1|$(timeout_message 'ranks 2, 3 (host nodeb)' 'ranks 0, 1 (host nodea)')\\n$(timeout_message 'ranks 2, 3 (host nodeb)' 'ranks 0, 1 (host nodea)')"
plan "0|0|"
supervise -- train --steps 40 --out "$out" --overwrite --ckpt-every 5
expect_rc 0
expect_calls "np=4 hosts=nodea,nodeb args=train --steps 40 --out $out --overwrite --ckpt-every 5" \
  "np=2 hosts=nodea args=train --steps 40 --out $out --ckpt-every 5 --resume $out/checkpoints/step_15"
[[ $(cat "$out/elastic/hostfile_2") == "nodea slots=2" ]] || fail "attempt 2's hostfile is not host a's line: $(cat "$out/elastic/hostfile_2")"
[[ -s $out/elastic/attempt_1.err && -f $out/elastic/attempt_2.out ]] || fail "no per-attempt logs in $out/elastic"
expect_log "restart 1 of at most 3 (attempt 2) | cause: ranks 2, 3 (host nodeb) unreachable: no heartbeat after the collective timeout | hosts dropped: nodeb | checkpoint: $out/checkpoints/step_15 | steps redone: 2 (16-17) | seconds lost: "
expect_log "| next: 2 rank(s) on nodea"
# seconds lost: the fake's 1 s after its last progress, plus the 2 redone steps' 0.5 s each.
line=$(grep -F 'restart 1 of' "$d/restarts.log")
[[ $line =~ seconds\ lost:\ ([0-9.]+)\ \(([0-9.]+)\ waiting\ \+\ 1\.0\ redoing\) ]] || fail "no 'seconds lost: T (W waiting + 1.0 redoing)' in: $line"
awk -v t="${BASH_REMATCH[1]}" -v w="${BASH_REMATCH[2]}" 'BEGIN { exit !(w >= 1.0 && w < 20 && t - w > 0.9 && t - w < 1.1) }' ||
  fail "seconds lost ${BASH_REMATCH[1]} (waiting ${BASH_REMATCH[2]}): expected waiting >= 1 s (the fake slept 1 s) and 1.0 s more"
[[ $line =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z\ dtr-elastic:\ restart ]] || fail "the log line does not start with the UTC time: $line"
expect_log "done: attempt 2 ended with exit status 0 after 1 restart(s)"
echo "ok: a host named unreachable is dropped and the job resumes from step_15 (not step_5, step_20.tmp or step_25)"

# ---- addresses in the hostfile: the lost host found by its ranks; the job's own --resume ----
new_case by_ranks '10.0.0.1 slots=2\n10.0.0.2 slots=2\n10.0.0.3 slots=2\n'
out=$d/out
plan "1|0|$(timeout_message 'ranks 2, 3 (host h1)' 'ranks 0, 1 (host h0), ranks 4, 5 (host h2)')"
plan "0|0|"
supervise --max-restarts 1 -- train --out="$out" --resume=/old/checkpoints/step_10 --steps 40
expect_rc 0
expect_calls "np=6 hosts=10.0.0.1,10.0.0.2,10.0.0.3 args=train --out=$out --resume=/old/checkpoints/step_10 --steps 40" \
  "np=4 hosts=10.0.0.1,10.0.0.3 args=train --out=$out --steps 40 --resume /old/checkpoints/step_10"
expect_log "restart 1 of at most 1 (attempt 2) | cause: ranks 2, 3 (host h1) unreachable: no heartbeat after the collective timeout | hosts dropped: 10.0.0.2 | checkpoint: /old/checkpoints/step_10 | steps redone: unknown"
echo "ok: the host of ranks 2, 3 is the hostfile's second; without a checkpoint in --out the job's --resume is used"

# ---- mpirun hangs after its ranks named a lost host: terminated after --grace ----
new_case grace 'nodea slots=2\nnodeb slots=2\n'
checkpoint step_10
plan "hang|0|$(timeout_message 'ranks 2, 3 (host nodeb)' 'ranks 0, 1 (host nodea)')"
plan "0|0|"
start=$SECONDS
supervise --grace 1 -- train --out "$d/out"
expect_rc 0
expect_calls "np=4 hosts=nodea,nodeb args=train --out $d/out" "got TERM" \
  "np=2 hosts=nodea args=train --out $d/out --resume $d/out/checkpoints/step_10"
[[ $((SECONDS - start)) -lt 10 ]] || fail "the hanging launcher was not ended within --grace 1 and a margin"
echo "ok: a launcher still running --grace seconds after its ranks named a lost host is terminated, then the job restarts"

# ---- mpirun lost a daemon: that host dropped ----
new_case lost_daemon 'nodea slots=2\nnodeb slots=2\n'
checkpoint step_10
plan "1|0|ORTE has lost communication with a remote daemon.\\n\\n  HNP daemon   : [[8755,0],0] on node launcher\\n  Remote daemon: [[8755,0],1] on node nodeb\\n\\nThis is usually due to either a failure of the TCP network"
plan "0|0|"
supervise -- train --out "$d/out"
expect_rc 0
expect_calls "np=4 hosts=nodea,nodeb args=train --out $d/out" \
  "np=2 hosts=nodea args=train --out $d/out --resume $d/out/checkpoints/step_10"
expect_log "cause: mpirun lost its daemon on nodeb | hosts dropped: nodeb | checkpoint: $d/out/checkpoints/step_10 | steps redone: unknown"
echo "ok: mpirun's lost daemon drops its host"

# ---- a rank dead on a host that answers: the same hosts again ----
new_case dead_rank 'nodea slots=2\nnodeb slots=2\n'
checkpoint step_10
plan "1|0|$(timeout_message 'rank 3 (host nodeb)' 'ranks 0, 1 (host nodea), rank 2 (host nodeb)')"
plan "0|0|"
supervise -- train --out "$d/out"
expect_rc 0
expect_calls "np=4 hosts=nodea,nodeb args=train --out $d/out" \
  "np=4 hosts=nodea,nodeb args=train --out $d/out --resume $d/out/checkpoints/step_10"
expect_log "cause: rank 3 (host nodeb) sent no heartbeat while other ranks there answered: dead or hung; every host answered | hosts dropped: none |"
echo "ok: a rank lost on a host that answers restarts on the same hosts"

# ---- --max-restarts: a rank killed by a signal, three times, at most 2 restarts ----
new_case max_restarts 'nodea slots=2\nnodeb slots=2\n'
checkpoint step_5
killed="1|0|--------\\nmpirun noticed that process rank 2 with PID 4242 on node nodeb exited on signal 9 (Killed).\\n--------"
plan "$killed"
plan "$killed"
plan "$killed"
supervise --max-restarts 2 -- train --out "$d/out"
expect_rc 1
resumed="np=4 hosts=nodea,nodeb args=train --out $d/out --resume $d/out/checkpoints/step_5"
expect_calls "np=4 hosts=nodea,nodeb args=train --out $d/out" "$resumed" "$resumed"
expect_log "restart 1 of at most 2 (attempt 2) | cause: rank 2 with PID 4242 on node nodeb exited on signal 9 (Killed); every host answered | hosts dropped: none |"
expect_log "restart 2 of at most 2 (attempt 3)"
expect_log "not restarted: attempt 3 failed (rank 2 with PID 4242 on node nodeb exited on signal 9 (Killed); every host answered), and the job was restarted 2 time(s) already (--max-restarts 2)"
echo "ok: --max-restarts 2 allows 2 restarts, then the supervisor stops with the job's status"

# ---- not restarted: bad input (exit 2), a non-finite loss, another error ----
new_case bad_input 'nodea slots=2\nnodeb slots=2\n'
checkpoint step_5
plan "2|0|dtr-train: --global-batch 6 must be divisible by the 4 ranks"
supervise -- train --out "$d/out" --global-batch 6
expect_rc 2
expect_calls "np=4 hosts=nodea,nodeb args=train --out $d/out --global-batch 6"
expect_log "not restarted: attempt 1 failed: exit status 2: bad input (flags, data or --resume), which a restart would repeat"

new_case nonfinite 'nodea slots=2\nnodeb slots=2\n'
checkpoint step_5
plan "1|0|[rank 0] dtr-train: step 12/40: the loss is not finite (loss nan, gradient norm nan); stopped without updating the parameters. Last checkpoint: x. Lower --lr\\nmpirun noticed that process rank 0 with PID 7 on node nodea exited on signal 6 (Aborted)."
supervise -- train --out "$d/out"
expect_rc 1
expect_calls "np=4 hosts=nodea,nodeb args=train --out $d/out"
expect_log "not restarted: attempt 1 failed: a non-finite loss or gradient norm (step 12/40: the loss is not finite), which a restart would repeat"

new_case other_error 'nodea slots=2\nnodeb slots=2\n'
checkpoint step_5
plan "1|0|dtr-train: --data nope.txt: cannot open: No such file or directory"
supervise -- train --out "$d/out"
expect_rc 1
expect_calls "np=4 hosts=nodea,nodeb args=train --out $d/out"
expect_log "not restarted: attempt 1 failed: exit status 1 with no lost rank or host in the job's output"
echo "ok: exit status 2, a non-finite loss and an error without lost ranks are not restarted"

# ---- stops with a reason: no complete checkpoint; no host left ----
new_case no_checkpoint 'nodea slots=2\nnodeb slots=2\n'
checkpoint step_20.tmp
checkpoint step_25 incomplete
plan "1|0|$(timeout_message 'ranks 2, 3 (host nodeb)' 'ranks 0, 1 (host nodea)')"
supervise -- train --out "$d/out"
expect_rc 1
expect_calls "np=4 hosts=nodea,nodeb args=train --out $d/out"
expect_log "not restarted: attempt 1 failed (ranks 2, 3 (host nodeb) unreachable: no heartbeat after the collective timeout), and $d/out/checkpoints holds no complete checkpoint to resume from (pass --ckpt-every N to the program); dtr-elastic does not start a run over from scratch"

new_case no_host_left 'nodea slots=2\n'
checkpoint step_5
plan "1|0|ORTE has lost communication with a remote daemon.\\n\\n  HNP daemon   : [[1,0],0] on node launcher\\n  Remote daemon: [[1,0],1] on node nodea"
supervise -- train --out "$d/out"
expect_rc 1
expect_log "not restarted: attempt 1 failed (mpirun lost its daemon on nodea), and no host is left (dropped: nodea)"
echo "ok: no checkpoint, or no host left: the supervisor stops and says why"

# ---- SIGTERM: passed to the job, which is not restarted ----
new_case sigterm 'nodea slots=2\n'
checkpoint step_5
plan "wait|0|"
FAKE_DIR=$d "$supervisor" --hostfile "$d/hosts" --launcher "$fake" --log "$d/restarts.log" -- train --out "$d/out" \
  >"$d/stdout" 2>"$d/stderr" &
pid=$!
for _ in $(seq 100); do [[ -f $d/running ]] && break; sleep 0.05; done
[[ -f $d/running ]] || fail "the fake job did not start"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
expect_rc 0
expect_calls "np=2 hosts=nodea args=train --out $d/out" "got TERM"
expect_log "stopped by SIGTERM: attempt 1 ended with exit status 0; not restarted"
echo "ok: SIGTERM reaches the job once, and the supervisor stops with its status"

# ---- bad usage: exit 2 and what was expected ----
new_case usage 'nodea\n'
supervise -- train
expect_rc 2
grep -qF "hosts line 1: expected 'HOST slots=N' with N >= 1, found 'nodea'" "$d/stderr" || fail "no message for a host without slots"
rc=0
"$supervisor" -- train >"$d/stdout" 2>"$d/stderr" || rc=$?
expect_rc 2
grep -qF -- "--hostfile FILE is required" "$d/stderr" || fail "no message for a missing --hostfile"
rc=0
"$supervisor" --hostfile "$d/hosts" --max-restarts two -- train >"$d/stdout" 2>"$d/stderr" || rc=$?
expect_rc 2
grep -qF -- "--max-restarts must be a whole number >= 0, got 'two'" "$d/stderr" || fail "no message for --max-restarts two"
[[ ! -f $d/calls ]] || fail "the launcher ran despite bad usage"
echo "ok: bad usage exits 2 naming what was expected"

echo "PASS: dtr-elastic restarts lost hosts' jobs from the newest complete checkpoint, and only those"
