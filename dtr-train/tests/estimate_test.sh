#!/usr/bin/env bash
# dtr-train --estimate-only:
#  1. the llama-7b shape planned for 8 ranks (--world-size, one process): exits 0
#     within 60 s, names the model with its parameter count (computed here from
#     the shape: 2 x vocab x dim + layers x (4 dim^2 + 3 dim ffn + 2 dim) + dim =
#     6738415616), prints rank 0's parameter shard (every dim splits evenly over
#     8 ranks: params x 4 B / 8), the per-rank total and the table of strategies,
#     and allocated less than 1 MiB of tensor memory (nothing materialised);
#  2. under mpirun -np 2 without --world-size it plans for the job's 2 ranks and
#     only rank 0 prints;
#  3. --world-size without --estimate-only is refused with exit code 2.
#   estimate_test.sh DTR_TRAIN MPIEXEC [MPIRUN_FLAGS...]
set -uo pipefail
train=$1 mpiexec=$2
shift 2
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

V=32000 D=4096 L=32 F=11008
params=$((2 * V * D + L * (4 * D * D + 3 * D * F + 2 * D) + D))
shard=$((params * 4 / 8))
start=$(date +%s%N)
out=$("$train" --estimate-only --model llama-7b --world-size 8 --micro-batch 1 --seq-len 4096 2>&1)
rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
echo "$out"
echo "(llama-7b estimate took ${ms} ms)"
[[ $rc -eq 0 ]] || fail "llama-7b estimate exited $rc"
((ms < 60000)) || fail "llama-7b estimate took ${ms} ms"
grep -q "model llama-7b (llama style, $params parameters" <<<"$out" || fail "no parameter count $params"
grep -q "on 8 rank(s)" <<<"$out" || fail "not planned for 8 ranks"
grep -q "per-rank estimate of this configuration" <<<"$out" || fail "no per-rank estimate"
grep -Eq "^  params +$shard B" <<<"$out" || fail "rank 0's parameter shard is not $shard B"
grep -Eq "^  total +[0-9]+ B" <<<"$out" || fail "no per-rank total"
grep -q "per-rank memory estimate (GiB): 8 ranks" <<<"$out" || fail "no per-rank table"
for s in FULL_SHARD SHARD_GRAD_OP NO_SHARD HYBRID_SHARD; do
  grep -q "^$s" <<<"$out" || fail "no $s row"
done
peak=$(sed -n 's/.*allocated while estimating: peak \([0-9]*\) B.*/\1/p' <<<"$out")
[[ -n $peak ]] && ((peak < 1048576)) || fail "allocated ${peak:-?} B of tensor memory"

out=$("$mpiexec" "$@" -np 2 "$train" --estimate-only --model tiny 2>&1)
rc=$?
[[ $rc -eq 0 ]] || fail "tiny estimate under mpirun -np 2 exited $rc: $out"
[[ $(grep -c "dtr-train --estimate-only" <<<"$out") -eq 1 ]] || fail "expected one report (rank 0), got: $out"
grep -q "on 2 rank(s)" <<<"$out" || fail "tiny estimate not planned for the job's 2 ranks: $out"

out=$("$train" --model tiny --world-size 4 2>&1)
rc=$?
[[ $rc -eq 2 ]] && grep -q -- "--world-size" <<<"$out" || fail "--world-size without --estimate-only: exit $rc: $out"

if ((failures > 0)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "estimate-only checks passed"
