// Catch2's main for the level parity tests: the level under test comes from
// DTR_TEST_CPU_LEVEL (baseline, avx2 or avx512). A level this CPU cannot run is a
// skip (exit 77, with the reason), not a pass. --print-cpu-level prints the level
// the kernels chose by themselves (DTR_CPU_CAPABILITY, else detection) and exits.
#include "tests/cpu_levels/level_under_test.h"
#include "tests/support/catch_session.h"

#include "dtr/base/error.h"
#include "dtr/kernels/cpu/cpu_level.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace dtr::test {

namespace {
kernels::cpu::CpuLevel g_level_under_test = kernels::cpu::CpuLevel::baseline;
}

kernels::cpu::CpuLevel level_under_test() { return g_level_under_test; }

}  // namespace dtr::test

int main(int argc, char** argv) {
  using namespace dtr::kernels::cpu;
  if (argc == 2 && std::strcmp(argv[1], "--print-cpu-level") == 0) {
    try {
      std::printf("cpu level: %s\n", cpu_level_description().c_str());
      return 0;
    } catch (const dtr::Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 2;
    }
  }
  const char* wanted = std::getenv("DTR_TEST_CPU_LEVEL");
  if (wanted == nullptr) {
    std::fprintf(stderr, "error: set DTR_TEST_CPU_LEVEL to baseline, avx2 or avx512\n");
    return 2;
  }
  bool known = false;
  for (CpuLevel level : {CpuLevel::baseline, CpuLevel::avx2, CpuLevel::avx512}) {
    if (std::string_view(wanted) != cpu_level_name(level)) continue;
    known = true;
    if (!cpu_level_supported(level)) {
      const std::vector<CpuLevel> levels = supported_cpu_levels();
      std::printf("SKIP: this CPU cannot run the %s kernels (it supports up to %s)\n", wanted,
                  cpu_level_name(levels.back()));
      return 77;
    }
    dtr::test::g_level_under_test = level;
  }
  if (!known) {
    std::fprintf(stderr, "error: DTR_TEST_CPU_LEVEL='%s': expected baseline, avx2 or avx512\n",
                 wanted);
    return 2;
  }
  std::printf("kernels at %s against baseline (detected: %s)\n", wanted,
              cpu_level_name(supported_cpu_levels().back()));
  return dtr::testing::run_catch_session(argc, argv);
}
