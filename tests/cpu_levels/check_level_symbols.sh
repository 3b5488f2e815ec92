#!/usr/bin/env bash
# Checks each level's relocatable object of CPU kernels (cmake/DtrCpuLevels.cmake):
# its global symbols are all in dtr::kernels::cpu::<level> (so no inline or template
# function compiled for that level can be linked in place of another level's copy),
# and it does define that level's kernels.
# Usage: check_level_symbols.sh <dtr_kernels_cpu_<level>.o>...
set -uo pipefail
status=0
for object in "$@"; do
  level=$(basename "$object" .o)
  level=${level#dtr_kernels_cpu_}
  prefix="_ZN3dtr7kernels3cpu${#level}${level}"
  globals=$(nm -g --defined-only "$object" | awk '{print $3}')
  foreign=$(grep -v "^$prefix" <<<"$globals" | grep -v '^$')
  kernels=$(grep -c "^$prefix" <<<"$globals")
  echo "$level: $kernels global symbols in dtr::kernels::cpu::$level, $(grep -c . <<<"$foreign") others"
  if [[ -n $foreign ]]; then
    echo "FAIL: $object makes other symbols global:"
    head -20 <<<"$foreign"
    status=1
  fi
  if ! grep -q "^${prefix}12softmax_rowsIfE" <<<"$globals"; then
    echo "FAIL: $object does not define dtr::kernels::cpu::$level::softmax_rows<float>"
    status=1
  fi
done
exit $status
