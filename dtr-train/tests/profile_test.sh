#!/usr/bin/env bash
# dtr-train --profile on 2 ranks (tiny model, 3 steps): each rank writes its
# trace (trace.rank<R>.json), which dtr_trace_check finds valid (JSON, pid =
# rank, nested spans, matched async pairs) and holding module forward/backward,
# all-gather and reduce-scatter issue and wait, the reduce-scatter's copy-out of
# the gradients (on the CPU the collectives themselves need no copies: the tiny
# model's rows divide over 2 ranks), optimizer step, data loading and step spans;
# rank 0 (only) prints the top-spans table.
# Then the same through DTR_PROFILE in the environment instead of the flag.
#   profile_test.sh DTR_TRAIN TRACE_CHECK OUT_DIR MPIEXEC [MPIRUN_FLAGS...]
set -euo pipefail
train=$1 check=$2 out=$3 mpiexec=$4
shift 4
rm -rf "$out"
mkdir -p "$out"
flags=(--model tiny --global-batch 4 --eval-every 0 --eval-batches 1 --sample-tokens 0 --progress-bar off)
spans=("forward/Transformer" "backward/Transformer" "forward/layers.0 (TransformerBlock)"
       "backward/layers.1 (TransformerBlock)" comm/all_gather comm_wait/all_gather comm/reduce_scatter
       comm_wait/reduce_scatter "fsdp/reduce_scatter copy_out" "optim/optimizer step" "data/load batch" train/step)

log=$("$mpiexec" "$@" -np 2 "$train" "${flags[@]}" --steps 3 --out "$out/flag" --profile "$out/flag/trace.json" 2>&1)
echo "$log"
[[ $(grep -c "^profile (rank 0)" <<<"$log") -eq 1 ]] || { echo "FAIL: expected one top-spans table"; exit 1; }
grep -q "% wall" <<<"$log" || { echo "FAIL: no table header"; exit 1; }
if grep -q "^profile (rank 1)" <<<"$log"; then echo "FAIL: rank 1 printed a table"; exit 1; fi
for r in 0 1; do "$check" "$out/flag/trace.rank$r.json" $r "${spans[@]}"; done

DTR_PROFILE="$out/env/trace.json" "$mpiexec" "$@" -x DTR_PROFILE -np 2 "$train" "${flags[@]}" --steps 1 \
  --out "$out/env" >/dev/null
for r in 0 1; do "$check" "$out/env/trace.rank$r.json" $r "${spans[@]}" >/dev/null; done
echo "profile checks passed"
