#!/usr/bin/env bash
# FSDP against HSDP, FSDP x TP and ZeRO++ across simulated hosts (scripts/cluster/): the FSDP step of a
# small GPT-2-style model (dtr_fsdp_step_bench) at 2 hosts x 2 ranks, with the
# links between hosts unshaped and shaped to each RATE, for
#   fsdp        full shard over all 4 ranks
#   fsdp-rto2   full shard, blocks keeping 1/2 (the ranks of a host) after forward
#               (reshard_after_forward = 2: backward all-gathers within a host)
#   hsdp        shard within each host, replicate across hosts (--hsdp)
#   fsdp-tp2    tensor parallel within each host (--tp 2), full shard of each
#               rank's split across the hosts
#   zero++      full shard with ZeRO++'s three: blocks keeping 1/2 after forward
#               (hpZ), int8 all-gathers (qwZ) and int4 partial gradient sums
#               (qgZ) between the hosts
# Prints per run: ms/step (median of the slowest rank), the bytes the hosts sent
# each other per step (their eth0 counters), the bytes dtr counted across hosts
# (mesh::CommStats: a ring's volume, summed over the ranks), the bytes the sharding theory gives
# for that traffic, and the share of the time that traffic takes at RATE which
# the step hides behind compute: 1 - (step at RATE - step unshaped) / (bytes / RATE).
# Needs root (namespaces); as root run on an idle machine.
#   bench/cluster_hsdp.sh [BUILD_DIR (build/test)] [RATE...] (default: 10gbit 1gbit 100mbit)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build/test}
shift || true
rates=("$@")
[[ ${#rates[@]} -gt 0 ]] || rates=(10gbit 1gbit 100mbit)
bench=$repo/$build/bench/dtr_fsdp_step_bench
[[ -x $bench ]] || { echo "cluster_hsdp: no $bench (build it first)" >&2; exit 2; }
model=(--layers 4 --dim 256 --heads 4 --vocab 4096 --seq 64 --batch 8 --steps 7 --warmup 2 --threads 1
       --no-compare-unsharded --count-interface eth0)
declare -A variants=([fsdp]="" [fsdp-rto2]="--reshard-to 2" [hsdp]="--hsdp" [fsdp-tp2]="--tp 2"
                     [zero++]="--reshard-to 2 --quantize-weights --quantize-grads 4")
order=(fsdp fsdp-rto2 hsdp fsdp-tp2 zero++)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_MCA_mpi_yield_when_idle=1

# One run: prints "ms_per_step mib_between_hosts psi mib_counted_across_hosts".
run() {  # run RATE VARIANT
  local args=()
  [[ $1 == unshaped ]] || args=(--rate "$1")
  "$repo/scripts/cluster/cluster.sh" run 2 "${args[@]}" -- \
    "$repo/scripts/cluster/mpirun.sh" -np 4 "$bench" "${model[@]}" ${variants[$2]} >"$out/$1.$2.log" 2>&1
  awk '/^ *FSDP \|/ { ms = $3 } /^Psi = / { psi = $3 } /Psi_tp = / { psi = $8 } /^Between hosts/ { mib = $(NF-4) }
       /^Counted by dtr/ { counted = $(NF-10) } END { print ms, mib, psi, counted }' "$out/$1.$2.log"
}

bits_per_second() {  # 10gbit -> 1e10
  local v=${1%bit}
  case $v in
    *g) echo "${v%g} * 1000000000" | bc ;;
    *m) echo "${v%m} * 1000000" | bc ;;
    *k) echo "${v%k} * 1000" | bc ;;
    *) echo "$v" ;;
  esac
}

echo "dtr FSDP vs HSDP vs FSDP x TP vs ZeRO++ across 2 simulated hosts x 2 ranks: ${model[*]}"
echo "CPU: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
declare -A base
for v in "${order[@]}"; do
  read -r ms mib psi counted < <(run unshaped "$v")
  base[$v]=$ms
  echo "unshaped $v: $ms ms/step, $mib MiB/step between hosts"
done
# Theory, summed over both hosts per step (f32, Psi parameters, N = 4 ranks, H = 2
# hosts, S = 2 ranks per host). Full shard: all-gather twice (forward, backward)
# and reduce-scatter once over a ring of 4 whose links cross hosts 2 times in 4:
# 3 * Psi * (N-1)/N * 4 bytes per rank, times N ranks, times H/N crossing.
# Backward all-gather within a host (rto2): 2 instead of 3 rounds cross. HSDP:
# reduce-scatter within a host, then an all-reduce of each Psi/S shard across the
# H hosts: 2 * (H-1)/H * Psi/S * 4 bytes per rank, each of them crossing. FSDP
# over TP (tp2): each rank's split (Psi_tp parameters) is all-gathered twice and
# reduce-scattered once between its 2 peers on the 2 hosts: 3 * Psi_tp * 1/2 * 4
# bytes per rank, all crossing (the tensor-parallel collectives stay within a host).
# ZeRO++: the forward all-gather sends each rank's shard once to its counterpart on
# the other host as int8 codes and one f32 scale per 256 (1 + 4/256 bytes per
# value), the backward one stays within the host, and each rank sends its host's
# partial sum of its counterpart's shard as int4 codes (1/2 + 4/256 bytes): N * Psi/N
# values each.
theory() {  # theory VARIANT PSI -> MiB
  case $1 in
    fsdp) echo "3 * $2 * 3 / 4 * 4 * 4 * 2 / 4 / 1048576" | bc -l ;;
    fsdp-rto2) echo "2 * $2 * 3 / 4 * 4 * 4 * 2 / 4 / 1048576" | bc -l ;;
    hsdp) echo "2 * 1 / 2 * $2 / 2 * 4 * 4 / 1048576" | bc -l ;;
    fsdp-tp2) echo "3 * $2 / 2 * 4 * 4 / 1048576" | bc -l ;;
    zero++) echo "$2 * ((1 + 4 / 256) + (1 / 2 + 4 / 256)) / 1048576" | bc -l ;;
  esac
}
printf '\n| link between hosts | variant | ms/step | MiB/step between hosts | counted by dtr MiB | theory MiB | hidden share |\n'
printf '|---|---|---|---|---|---|---|\n'
for v in "${order[@]}"; do
  read -r ms mib psi counted < <(awk '/^ *FSDP \|/ { ms = $3 } /^Psi = / { psi = $3 } /Psi_tp = / { psi = $8 }
                                       /^Between hosts/ { mib = $(NF-4) } /^Counted by dtr/ { counted = $(NF-10) }
                                       END { print ms, mib, psi, counted }' "$out/unshaped.$v.log")
  printf '| unshaped (veth) | %s | %s | %s | %s | %.2f | - |\n' "$v" "$ms" "$mib" "$counted" "$(theory "$v" "$psi")"
done
for rate in "${rates[@]}"; do
  bps=$(bits_per_second "$rate")
  for v in "${order[@]}"; do
    read -r ms mib psi counted < <(run "$rate" "$v")
    hidden=$(echo "wire = $mib * 1048576 * 8 / $bps * 1000; e = $ms - ${base[$v]}; if (wire > 0) 1 - e / wire else 0" | bc -l)
    # Outside [0, 1] the difference of two step times is within their noise.
    share=$(echo "$hidden * 100" | bc -l)
    if [[ $(echo "$hidden < 0 || $hidden > 1" | bc -l) -eq 1 ]]; then share="n/a (noise)"; else share=$(printf '%.0f%%' "$share"); fi
    printf '| %s | %s | %s | %s | %s | %.2f | %s |\n' "$rate" "$v" "$ms" "$mib" "$counted" "$(theory "$v" "$psi")" "$share"
  done
done
