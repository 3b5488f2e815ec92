#!/usr/bin/env bash
# A checkpoint records what it was trained as, and --resume checks it (2 ranks):
# a model with the same tensor shapes but other heads is refused naming the
# field; a changed --global-batch or --seed is refused unless --allow-config-change,
# which then says what changed; another world size is allowed and said; dtr-ckpt
# info prints both records.
#   resume_config_test.sh DTR_TRAIN DTR_CKPT OUT_DIR MPIEXEC [MPIRUN_FLAGS...]
set -euo pipefail
train=$1 ckpt_tool=$2 out=$3 mpiexec=$4
shift 4
# The refused runs' ranks all exit 2 by themselves: mpirun need not wait its
# default second before it SIGKILLs the ranks of a job whose ranks exited non-zero.
export OMPI_MCA_odls_base_sigkill_timeout=0
rm -rf "$out"
mkdir -p "$out"
fail() { echo "FAIL: $*" >&2; exit 1; }
echo '{"dim": 64, "n_layers": 2, "n_heads": 4, "max_seq_len": 32}' > "$out/heads4.json"
echo '{"dim": 64, "n_layers": 2, "n_heads": 8, "max_seq_len": 32}' > "$out/heads8.json"
common=(--eval-every 0 --eval-batches 1 --sample-tokens 0 --progress-bar off --lr 1e-2)
"$mpiexec" "$@" -np 2 "$train" "${common[@]}" --global-batch 8 --model "$out/heads4.json" --steps 2 --out "$out/a" > "$out/a.log" 2>&1 ||
  { cat "$out/a.log" >&2; fail "the first run failed"; }
step2="$out/a/checkpoints/step_2"

expect_refused() {  # expect_refused NAME MESSAGE ARGS...: exit 2 and MESSAGE on stderr
  local name=$1 message=$2
  shift 2
  set +e
  "$mpiexec" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  set -e
  [[ $rc -eq 2 ]] || fail "$name: exit $rc, expected 2: $(cat "$out/$name.log")"
  grep -qF -- "$message" "$out/$name.log" || fail "$name: no '$message' in: $(cat "$out/$name.log")"
  echo "ok: $name refused: $(grep -F -- "$message" "$out/$name.log" | head -1)"
}
resume=("$@" -np 2 "$train" "${common[@]}" --steps 3 --resume "$step2")

expect_refused other_model "the checkpoint is of another model: its n_heads is 4, this run's --model gives 8" \
  "${resume[@]}" --global-batch 8 --model "$out/heads8.json" --out "$out/b"
expect_refused batch "this run changes settings the checkpoint was trained with (global_batch 8 -> 16); pass --allow-config-change" \
  "${resume[@]}" --model "$out/heads4.json" --global-batch 16 --out "$out/c"
expect_refused seed "(seed 1234 -> 7)" "${resume[@]}" --global-batch 8 --model "$out/heads4.json" --seed 7 --out "$out/d"

"$mpiexec" "${resume[@]}" --model "$out/heads4.json" --global-batch 16 --allow-config-change --out "$out/e" \
  > "$out/e.log" 2>&1 || { cat "$out/e.log" >&2; fail "--allow-config-change: the resume failed"; }
grep -q "^resuming with changed settings: global_batch 8 -> 16$" "$out/e.log" ||
  fail "--allow-config-change does not say what changed: $(cat "$out/e.log")"
echo "ok: --allow-config-change resumed and said: global_batch 8 -> 16"

"$mpiexec" "$@" -np 1 "$train" "${common[@]}" --global-batch 8 --steps 3 --resume "$step2" --model "$out/heads4.json" --out "$out/f" \
  > "$out/f.log" 2>&1 || { cat "$out/f.log" >&2; fail "resuming at 1 rank failed"; }
grep -q "^resuming with changed settings: world_size 2 -> 1$" "$out/f.log" || fail "1 rank: $(cat "$out/f.log")"
echo "ok: another world size resumes and says so"

"$ckpt_tool" info "$step2" > "$out/info.log"
grep -q '^model_config: {.*"n_heads":4' "$out/info.log" || fail "dtr-ckpt info: no model_config: $(cat "$out/info.log")"
grep -q '^run_settings: {.*"global_batch":8.*"seed":1234' "$out/info.log" || fail "dtr-ckpt info: no run_settings"
echo "PASS: resume checks the model and the run settings the checkpoint records"
