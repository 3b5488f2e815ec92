#!/usr/bin/env bash
# CTest driver for dtr-ckpt on the 4-rank reference checkpoint that
# tests/checkpoint/checkpoint_test.cpp writes (fixture dtr_checkpoint_reference).
#   check_dtr_ckpt.sh MODE TOOL CHECKPOINT_DIR WORK_DIR
# MODE: info | verify | corrupt | edited | consolidate
set -u
mode=$1 tool=$2 ref=$3 work=$4
fail() { echo "FAIL: $*"; exit 1; }
# Copies the checkpoint to $1 and changes byte 100 of rank_1.bin.
corrupt_copy() {
  rm -rf "$1" && cp -r "$ref" "$1" || fail "copy"
  local f=$1/rank_1.bin orig
  orig=$(od -An -tu1 -j100 -N1 "$f" | tr -d ' ')
  printf "\\$(printf %03o $(( (orig + 1) % 256 )))" | dd of="$f" bs=1 seek=100 conv=notrunc status=none
}
[ -f "$ref/metadata.json" ] || fail "no checkpoint at $ref"
case $mode in
  info)
    out=$("$tool" info "$ref") || fail "info exited $?"
    echo "$out"
    grep -q "written with world size 4" <<<"$out" || fail "world size missing"
    grep -Eq "^layers\.0\.attn\.wq\.weight +f32 +\[16, 16\]" <<<"$out" || fail "parameter line missing"
    grep -Eq "^optim\.layers\.0\.attn\.wq\.weight\.exp_avg +f32" <<<"$out" || fail "optimizer line missing"
    grep -Eq "tensors, 4 data files" <<<"$out" || fail "file count missing"
    ;;
  verify)
    out=$("$tool" verify "$ref" 2>&1) || fail "verify of an intact checkpoint exited $?: $out"
    echo "$out"
    grep -q "OK" <<<"$out" || fail "no OK"
    ;;
  corrupt)
    copy=$work/dtr_ckpt_corrupt
    corrupt_copy "$copy"
    file=$copy/rank_1.bin
    cmp -s "$file" "$ref/rank_1.bin" && fail "the copy was not changed"
    out=$("$tool" verify "$copy" 2>&1)
    rc=$?
    echo "$out"
    [ $rc -ne 0 ] || fail "verify of a corrupted checkpoint exited 0"
    grep -Eq "tensor '[^']+': checksum mismatch in $file" <<<"$out" || fail "message does not name tensor and file"
    n=$(grep -c "^FAILED:" <<<"$out")
    [ "$n" -eq 1 ] || fail "expected exactly one problem, got $n"
    ;;
  edited)  # one number of metadata.json changed: refused by its checksum, naming the file
    copy=$work/dtr_ckpt_edited
    rm -rf "$copy" && cp -r "$ref" "$copy" || fail "copy"
    sed -i 's/"world_size": 4/"world_size": 5/' "$copy/metadata.json"
    cmp -s "$copy/metadata.json" "$ref/metadata.json" && fail "the copy was not changed"
    out=$("$tool" verify "$copy" 2>&1)
    rc=$?
    echo "$out"
    [ $rc -ne 0 ] || fail "verify of an edited metadata.json exited 0"
    grep -q "$copy/metadata.json is malformed: it fails its checksum" <<<"$out" || fail "message does not name the checksum"
    ;;
  consolidate)
    out_file=$work/ckpt_consolidated_fsdp.safetensors
    rm -f "$out_file"
    "$tool" consolidate "$ref" "$out_file" || fail "consolidate exited $?"
    [ -s "$out_file" ] || fail "no output"
    [ ! -e "$out_file.tmp" ] || fail "temporary file left behind"
    # A corrupted checkpoint is refused, naming tensor and file.
    corrupt_copy "$work/dtr_ckpt_corrupt_c"
    err=$("$tool" consolidate "$work/dtr_ckpt_corrupt_c" "$work/corrupt.safetensors" 2>&1) &&
      fail "consolidate of a corrupt checkpoint succeeded"
    echo "$err"
    grep -Eq "tensor '[^']+': checksum mismatch in $work/dtr_ckpt_corrupt_c/rank_1.bin" <<<"$err" ||
      fail "consolidate's error does not name tensor and file"
    [ ! -e "$work/corrupt.safetensors" ] || fail "consolidate left an output for a corrupt checkpoint"
    ;;
  *) fail "unknown mode $mode" ;;
esac
echo "PASS: $mode"
