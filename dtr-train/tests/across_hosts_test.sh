#!/usr/bin/env bash
# dtr-train across 2 simulated hosts x 2 ranks (scripts/cluster/) trains as 4
# ranks on one host: the same loss at every step up to rounding (within a host
# the MPI backend reduce-scatters by an all-to-all summed in rank order, across
# hosts by MPI's ring, which sums in another order). With --hsdp it builds the
# (replicate = 2 hosts, shard = 2 ranks) mesh itself, and its losses equal those
# of FSDP over 4 ranks up to rounding too. With --tp 2 each host is one
# tensor-parallel group and FSDP shards across the hosts: the losses equal those of
# --tp 2 on one host bit for bit (a sum over 2 ranks is the same in either order).
# With ZeRO++'s three (--reshard-after-forward host --quantize-weights
# --quantize-grads 4), and with --quantize-weights or --quantize-grads 8 alone, the
# losses stay within 5% of FSDP's across the hosts at every step and within 2% over
# the last 4, with fewer bytes across the hosts; on one
# host the quantization flags change nothing, bit for bit.
# The bytes metrics.jsonl counts per step (steps 2-12) are the same in all on one
# host and across hosts, none across hosts on one host, and across hosts fewer
# with --hsdp and with --tp 2 than with FSDP over the 4 ranks; ZeRO++ sends at
# most 0.3x FSDP's across the hosts.
#   across_hosts_test.sh DTR_TRAIN OUT_DIR MPIEXEC [MPIRUN_FLAGS...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
train=$1 out=$2 mpiexec=$3
shift 3
rm -rf "$out"
common=(--model tiny --steps 12 --global-batch 8 --eval-every 0 --eval-batches 1 --log-every 4 --lr 1e-2
        --sample-tokens 0 --progress-bar off --no-final-checkpoint)
# First across hosts: it skips (exit 77) where no cluster can be made.
"$here/../../tests/cluster/on_cluster.sh" 2 4 "$train" "${common[@]}" --out "$out/two_hosts"
"$mpiexec" "$@" -np 4 "$train" "${common[@]}" --out "$out/one_host"
losses() { sed -E 's|.*"loss":([^,}]*).*"step":([0-9]+).*|\2 \1|' "$1"; }
# Same steps, losses within 1e-4 relative.
same_losses() {  # same_losses WHAT METRICS_A METRICS_B
  paste -d' ' <(losses "$2") <(losses "$3") | awk -v what="$1" '
    { n++; d = $2 - $4; if (d < 0) d = -d; if ($1 != $3 || d > 1e-4 * ($2 < 0 ? -$2 : $2)) bad = bad " step " $1 ": " $2 " vs " $4 }
    END { if (n != 12 || bad != "") { print "FAIL: " what " losses differ from one host by more than 1e-4 relative:" bad " (" n " steps)" > "/dev/stderr"; exit 1 } }'
}
same_losses "2-host" "$out/one_host/metrics.jsonl" "$out/two_hosts/metrics.jsonl"

"$here/../../tests/cluster/on_cluster.sh" 2 4 "$train" "${common[@]}" --hsdp --out "$out/hsdp" | tee "$out/hsdp.log"
grep -q "on 4 rank(s) (2 hosts, HSDP: replicate 2 x shard 2)" "$out/hsdp.log" ||
  { echo "FAIL: dtr-train --hsdp did not report a (2 hosts, 2 ranks) HSDP mesh" >&2; exit 1; }
same_losses "--hsdp" "$out/one_host/metrics.jsonl" "$out/hsdp/metrics.jsonl"

"$here/../../tests/cluster/on_cluster.sh" 2 4 "$train" "${common[@]}" --tp 2 --out "$out/tp" | tee "$out/tp.log"
grep -q "on 4 rank(s) (2 hosts, FSDP over 2 ranks x tensor parallel 2)" "$out/tp.log" ||
  { echo "FAIL: dtr-train --tp 2 did not report FSDP over the 2 hosts x tensor parallel 2" >&2; exit 1; }
"$mpiexec" "$@" -np 4 "$train" "${common[@]}" --tp 2 --out "$out/tp_one_host"
cmp <(losses "$out/tp_one_host/metrics.jsonl") <(losses "$out/tp/metrics.jsonl") ||
  { echo "FAIL: --tp 2 across 2 hosts: the losses differ from --tp 2 on one host" >&2;
    paste <(losses "$out/tp_one_host/metrics.jsonl") <(losses "$out/tp/metrics.jsonl") >&2; exit 1; }
[[ $(losses "$out/tp/metrics.jsonl" | wc -l) -eq 12 ]] || { echo "FAIL: --tp 2 across hosts logged no 12 steps" >&2; exit 1; }
# --reshard-after-forward host (hpZ): the backward all-gathers stay within each
# host; the losses are FSDP's across the hosts bit for bit (all-gathers are exact).
"$here/../../tests/cluster/on_cluster.sh" 2 4 "$train" "${common[@]}" --reshard-after-forward host --out "$out/hpz" |
  tee "$out/hpz.log"
grep -q "reshard_after_forward host (hpZ: blocks keep 1/2 after forward, backward all-gathers within each host)" \
  "$out/hpz.log" || { echo "FAIL: --reshard-after-forward host did not report a host-local shard" >&2; exit 1; }
cmp <(losses "$out/two_hosts/metrics.jsonl") <(losses "$out/hpz/metrics.jsonl") ||
  { echo "FAIL: --reshard-after-forward host: the losses differ from FSDP across the hosts" >&2; exit 1; }
# ZeRO++: hpZ, int8 weights and int4 gradients between the hosts; and each
# quantization alone. Each step within 5% of FSDP's (a 12-step run at lr 1e-2 has
# single-step spikes), the mean of the last 4 within 2%.
near_fsdp() {  # near_fsdp WHAT METRICS
  paste -d' ' <(losses "$out/two_hosts/metrics.jsonl") <(losses "$2") | awk -v what="$1" '
    { n++; d = $2 - $4; if (d < 0) d = -d; if ($1 != $3 || d > 5e-2 * $2) bad = bad " step " $1 ": " $2 " vs " $4
      if (n > 8) { exact += $2; quantized += $4 } }
    END { d = exact - quantized; if (d < 0) d = -d
          if (n != 12 || bad != "" || d > 2e-2 * exact) {
            printf "FAIL: %s losses differ from FSDP by more than 5%% a step or 2%% over steps 9-12 (%.4f vs %.4f):%s\n",
              what, exact / 4, quantized / 4, bad > "/dev/stderr"; exit 1 } }'
}
zeropp=(--reshard-after-forward host --quantize-weights --quantize-grads 4)
"$here/../../tests/cluster/on_cluster.sh" 2 4 "$train" "${common[@]}" "${zeropp[@]}" --out "$out/zeropp" |
  tee "$out/zeropp.log"
grep -q "quantized communication between hosts: weights int8, gradients int4 (2 hosts of 2 ranks)" "$out/zeropp.log" ||
  { echo "FAIL: dtr-train did not report quantized communication between 2 hosts" >&2; exit 1; }
near_fsdp "ZeRO++" "$out/zeropp/metrics.jsonl"
"$here/../../tests/cluster/on_cluster.sh" 2 4 "$train" "${common[@]}" --quantize-weights --out "$out/qwz"
near_fsdp "--quantize-weights" "$out/qwz/metrics.jsonl"
"$here/../../tests/cluster/on_cluster.sh" 2 4 "$train" "${common[@]}" --quantize-grads 8 --out "$out/qgz"
near_fsdp "--quantize-grads 8" "$out/qgz/metrics.jsonl"
"$mpiexec" "$@" -np 4 "$train" "${common[@]}" --quantize-weights --quantize-grads 8 --out "$out/quantized_one_host" |
  tee "$out/quantized_one_host.log"
grep -q "share one host (nothing quantized)" "$out/quantized_one_host.log" ||
  { echo "FAIL: on one host dtr-train did not say that nothing is quantized" >&2; exit 1; }
cmp <(losses "$out/one_host/metrics.jsonl") <(losses "$out/quantized_one_host/metrics.jsonl") ||
  { echo "FAIL: on one host the quantization flags changed the losses" >&2; exit 1; }

# The bytes of steps 2-12 (step 1's count also holds the set-up's collectives).
sent() {  # sent METRICS KEY -> the sum over steps 2-12
  sed -nE "s/.*\"$2\":([0-9]+).*\"step\":([0-9]+).*/\2 \1/p" "$1" | awk '$1 > 1 { s += $2 } END { print s + 0 }'
}
within_one=$(sent "$out/one_host/metrics.jsonl" comm_bytes_within_host)
across_one=$(sent "$out/one_host/metrics.jsonl" comm_bytes_across_hosts)
within_two=$(sent "$out/two_hosts/metrics.jsonl" comm_bytes_within_host)
across_two=$(sent "$out/two_hosts/metrics.jsonl" comm_bytes_across_hosts)
across_hsdp=$(sent "$out/hsdp/metrics.jsonl" comm_bytes_across_hosts)
across_tp=$(sent "$out/tp/metrics.jsonl" comm_bytes_across_hosts)
across_hpz=$(sent "$out/hpz/metrics.jsonl" comm_bytes_across_hosts)
across_zeropp=$(sent "$out/zeropp/metrics.jsonl" comm_bytes_across_hosts)
across_qwz=$(sent "$out/qwz/metrics.jsonl" comm_bytes_across_hosts)
across_qgz=$(sent "$out/qgz/metrics.jsonl" comm_bytes_across_hosts)
echo "bytes sent in steps 2-12: one host $within_one within; two hosts $within_two within, $across_two across;" \
  "across hosts --hsdp $across_hsdp, --tp 2 $across_tp, --reshard-after-forward host $across_hpz," \
  "ZeRO++ $across_zeropp, --quantize-weights $across_qwz, --quantize-grads 8 $across_qgz"
((within_one > 0 && across_one == 0)) || { echo "FAIL: one host counted $across_one B across hosts" >&2; exit 1; }
((within_two + across_two == within_one)) ||
  { echo "FAIL: the same job counted $((within_two + across_two)) B on two hosts, $within_one B on one" >&2; exit 1; }
((across_two > 0 && across_hsdp < across_two && across_tp < across_two && across_hpz < across_two)) ||
  { echo "FAIL: across hosts: FSDP $across_two B, --hsdp $across_hsdp B, --tp 2 $across_tp B," \
      "--reshard-after-forward host $across_hpz B" >&2; exit 1; }
((across_qwz > 0 && across_qwz < across_two && across_qgz > 0 && across_qgz < across_two)) ||
  { echo "FAIL: across hosts: FSDP $across_two B, --quantize-weights $across_qwz B, --quantize-grads 8" \
      "$across_qgz B" >&2; exit 1; }
((across_zeropp > 0 && across_zeropp * 10 <= across_two * 3)) ||
  { echo "FAIL: ZeRO++ sent $across_zeropp B across hosts, FSDP $across_two B (at most 0.3x expected)" >&2; exit 1; }
echo "PASS: 12 steps across 2 hosts x 2 ranks give the losses of 4 ranks on one host within 1e-4, --hsdp too;" \
  "--tp 2 (tensor parallel within a host, FSDP across) those of --tp 2 on one host bit for bit;" \
  "--reshard-after-forward host those of FSDP bit for bit; ZeRO++ within 2% of them over steps 9-12 at" \
  "$(awk -v a="$across_zeropp" -v b="$across_two" 'BEGIN { printf "%.3f", a / b }')x the bytes across hosts; the bytes across hosts are counted"
