#!/usr/bin/env bash
# The host code under AddressSanitizer and UndefinedBehaviorSanitizer: a CPU-only
# clang build (build/sanitize) with -DDTR_SANITIZE="address;undefined", every
# finding fatal, then the tests through CTest. Open MPI's own leaks are
# suppressed (scripts/sanitizers/lsan.supp), nothing of dtr's. The same build
# holds the libFuzzer targets that scripts/fuzz.sh runs.
#   scripts/sanitize.sh [ctest args...]   e.g. -L unit, or -R checkpoint
# Without arguments it runs every test but the GPU ones (they need the CUDA
# build), the install test (it builds a consumer without the sanitizers) and the
# CPU-emulation ones (qemu-user cannot host AddressSanitizer's shadow memory).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/sanitizers/build.sh
here=$(pwd)
# Full unwinding at each allocation, so a leak's stack reaches the library that made it.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:fast_unwind_on_malloc=0"
export LSAN_OPTIONS="suppressions=$here/scripts/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export OMPI_MCA_mpi_yield_when_idle=1
# Open MPI unloads its components (mca_*.so) at finalize, after which their leaks
# have no module name to match the suppressions: keep them loaded.
export OMPI_MCA_mca_base_component_disable_dlclose=1
args=("$@")
[[ ${#args[@]} -gt 0 ]] || args=(-LE "gpu|install|qemu")
ctest --test-dir build/sanitize --output-on-failure --timeout 1200 -j "$(nproc)" "${args[@]}"
