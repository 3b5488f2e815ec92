#include "dtr/kernels/cpu/cpu_level.h"

#include "dtr/base/error.h"
#include "dtr/base/log.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string_view>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace dtr::kernels::cpu {

namespace {

constexpr CpuLevel kAllLevels[] = {CpuLevel::baseline, CpuLevel::avx2, CpuLevel::avx512};

#if defined(__x86_64__)
bool bit(unsigned word, int index) { return (word >> index) & 1u; }

// The register state the OS saves on context switches (XCR0), 0 without OSXSAVE.
unsigned long long os_saved_state(unsigned leaf1_ecx) {
  if (!bit(leaf1_ecx, 27)) return 0;  // OSXSAVE
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

// The highest level whose every feature the CPU reports and the OS enables, by the
// x86-64 psABI's definitions of x86-64-v3 and x86-64-v4.
CpuLevel detect_level() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return CpuLevel::baseline;
  const unsigned leaf1_ecx = ecx;
  unsigned leaf7_ebx = 0;
  if (__get_cpuid_max(0, nullptr) >= 7) {
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    leaf7_ebx = ebx;
  }
  unsigned ext1_ecx = 0;
  if (__get_cpuid(0x80000001, &eax, &ebx, &ecx, &edx)) ext1_ecx = ecx;
  const unsigned long long xcr0 = os_saved_state(leaf1_ecx);

  const bool v3 = bit(leaf1_ecx, 12) /* FMA */ && bit(leaf1_ecx, 22) /* MOVBE */ &&
                  bit(leaf1_ecx, 28) /* AVX */ && bit(leaf1_ecx, 29) /* F16C */ &&
                  bit(leaf7_ebx, 3) /* BMI1 */ && bit(leaf7_ebx, 5) /* AVX2 */ &&
                  bit(leaf7_ebx, 8) /* BMI2 */ && bit(ext1_ecx, 5) /* LZCNT */ &&
                  (xcr0 & 0x6) == 0x6 /* SSE and AVX state */;
  if (!v3) return CpuLevel::baseline;
  const bool v4 = bit(leaf7_ebx, 16) /* AVX512F */ && bit(leaf7_ebx, 17) /* DQ */ &&
                  bit(leaf7_ebx, 28) /* CD */ && bit(leaf7_ebx, 30) /* BW */ &&
                  bit(leaf7_ebx, 31) /* VL */ && (xcr0 & 0xe0) == 0xe0 /* opmask, ZMM state */;
  return v4 ? CpuLevel::avx512 : CpuLevel::avx2;
}
#else
CpuLevel detect_level() { return CpuLevel::baseline; }
#endif

CpuLevel best_supported_level() {
  static const CpuLevel best = detect_level();
  return best;
}

// -1 until resolved; then the active CpuLevel. Read on every kernel call.
std::atomic<int> g_active_level{-1};
std::mutex g_resolve_mutex;
const char* g_level_source = "detected";

CpuLevel parse_level(std::string_view name) {
  for (CpuLevel level : kAllLevels) {
    if (name == cpu_level_name(level)) return level;
  }
  DTR_FAIL("DTR_CPU_CAPABILITY='{}': expected one of baseline, avx2, avx512", name);
}

CpuLevel resolve_level() {
  const char* forced = std::getenv("DTR_CPU_CAPABILITY");
  if (forced == nullptr || *forced == '\0') return best_supported_level();
  const CpuLevel level = parse_level(forced);
  DTR_CHECK(cpu_level_supported(level),
            "DTR_CPU_CAPABILITY={}: this CPU supports only up to {} (the CPU kernels "
            "would stop with an illegal instruction)",
            forced, cpu_level_name(best_supported_level()));
  g_level_source = "DTR_CPU_CAPABILITY";
  return level;
}

}  // namespace

const char* cpu_level_name(CpuLevel level) {
  switch (level) {
    case CpuLevel::baseline: return "baseline";
    case CpuLevel::avx2: return "avx2";
    case CpuLevel::avx512: return "avx512";
  }
  return "unknown";
}

bool cpu_level_supported(CpuLevel level) {
  return static_cast<int>(level) <= static_cast<int>(best_supported_level());
}

std::vector<CpuLevel> supported_cpu_levels() {
  std::vector<CpuLevel> levels;
  for (CpuLevel level : kAllLevels) {
    if (cpu_level_supported(level)) levels.push_back(level);
  }
  return levels;
}

CpuLevel active_cpu_level() {
  const int active = g_active_level.load(std::memory_order_relaxed);
  if (active >= 0) [[likely]] return static_cast<CpuLevel>(active);
  std::lock_guard<std::mutex> lock(g_resolve_mutex);
  if (g_active_level.load() < 0) {
    const CpuLevel level = resolve_level();
    DTR_LOG_DEBUG("CPU kernels: {} ({})", cpu_level_name(level), g_level_source);
    g_active_level.store(static_cast<int>(level));
  }
  return static_cast<CpuLevel>(g_active_level.load());
}

std::string cpu_level_description() {
  const CpuLevel level = active_cpu_level();
  std::lock_guard<std::mutex> lock(g_resolve_mutex);
  return fmt::format("{} ({})", cpu_level_name(level), g_level_source);
}

void set_cpu_level(CpuLevel level) {
  DTR_CHECK(cpu_level_supported(level), "set_cpu_level({}): this CPU supports only up to {}",
            cpu_level_name(level), cpu_level_name(best_supported_level()));
  std::lock_guard<std::mutex> lock(g_resolve_mutex);
  g_level_source = "set_cpu_level";
  g_active_level.store(static_cast<int>(level));
}

}  // namespace dtr::kernels::cpu
