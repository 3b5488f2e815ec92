#!/usr/bin/env bash
# Installs the built dtr into a temporary prefix and moves the installed tree to
# another place (the package must be relocatable: no absolute path of the build,
# the install prefix or a dependency in its CMake files), then configures, builds
# and runs a separate project that uses it there through find_package(dtr): once
# alone, and, given a Hugging Face model directory, under mpirun on 2 ranks to
# load it sharded and fine-tune it.
# Usage: check_install.sh <dtr build dir> <consumer source dir> <scratch dir>
#                         [<HF model dir> <mpiexec> [mpirun flags...]]
set -euo pipefail
build=$1 consumer=$2 scratch=$3 hf_model=${4:-} mpiexec=${5:-}
shift $(( $# < 5 ? $# : 5 ))  # the rest: mpirun flags
rm -rf "$scratch" && mkdir -p "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
mv "$scratch/prefix" "$scratch/moved"
package=$(find "$scratch/moved" -path "*/cmake/dtr" -type d)
if grep -nE "$scratch/prefix|/usr/local/cuda|/usr/include|/usr/lib" "$package"/*.cmake; then
  echo "FAIL: the installed package names absolute paths (above); it must find its dependencies itself" >&2
  exit 1
fi
# Consumers include <dtr/...>: the installed include folder holds dtr/ and nothing else.
others=$(ls "$scratch/moved/include" | grep -vx dtr || true)
if [[ -n $others ]]; then
  echo "FAIL: the installed include folder has names besides dtr/: $others" >&2
  exit 1
fi
cmake -S "$consumer" -B "$scratch/build" -G Ninja -DCMAKE_PREFIX_PATH="$scratch/moved" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$scratch/build" >/dev/null
"$scratch/build/consumer"
if [[ -n $hf_model ]]; then
  OMPI_MCA_mpi_yield_when_idle=1 "$mpiexec" "$@" -np 2 "$scratch/build/consumer" "$hf_model"
fi
