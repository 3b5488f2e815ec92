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

// Which levels this build compiled (cpu_level.h: DTR_CPU_WITHOUT_<LEVEL>).
#if defined(DTR_CPU_WITHOUT_BASELINE)
constexpr bool kBaselineBuilt = false;
#else
constexpr bool kBaselineBuilt = true;
#endif
#if defined(__x86_64__) && !defined(DTR_CPU_WITHOUT_AVX2)
constexpr bool kAvx2Built = true;
#else
constexpr bool kAvx2Built = false;
#endif
#if defined(__x86_64__) && !defined(DTR_CPU_WITHOUT_AVX512)
constexpr bool kAvx512Built = true;
#else
constexpr bool kAvx512Built = false;
#endif

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

// The highest level this CPU and OS can run, whether or not this build has it.
CpuLevel cpu_capability() {
  static const CpuLevel best = detect_level();
  return best;
}

std::string built_level_names() {
  std::string names;
  for (CpuLevel level : kAllLevels) {
    if (!cpu_level_built(level)) continue;
    if (!names.empty()) names += ", ";
    names += cpu_level_name(level);
  }
  return names;
}

// Why `level` cannot run here, for errors; empty when it can.
std::string unsupported_reason(CpuLevel level) {
  if (!cpu_level_built(level)) {
    return fmt::format("this build of dtr has the CPU kernels for {} only (CMake's DTR_CPU_LEVELS)",
                       built_level_names());
  }
  if (!cpu_level_supported(level)) {
    return fmt::format("this CPU supports only up to {} (the {} kernels would stop with an illegal "
                       "instruction)",
                       cpu_level_name(cpu_capability()), cpu_level_name(level));
  }
  return {};
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
  if (forced == nullptr || *forced == '\0') {
    const std::vector<CpuLevel> levels = supported_cpu_levels();
    DTR_CHECK(!levels.empty(),
              "CPU kernels: this build of dtr has them for {} only (CMake's DTR_CPU_LEVELS), and "
              "this CPU supports only up to {}: rebuild dtr with -DDTR_CPU_LEVELS={} (or without "
              "DTR_CPU_LEVELS, for every level)",
              built_level_names(), cpu_level_name(cpu_capability()), cpu_level_name(cpu_capability()));
    return levels.back();
  }
  const CpuLevel level = parse_level(forced);
  const std::string reason = unsupported_reason(level);
  DTR_CHECK(reason.empty(), "DTR_CPU_CAPABILITY={}: {}", forced, reason);
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

bool cpu_level_built(CpuLevel level) {
  switch (level) {
    case CpuLevel::baseline: return kBaselineBuilt;
    case CpuLevel::avx2: return kAvx2Built;
    case CpuLevel::avx512: return kAvx512Built;
  }
  return false;
}

bool cpu_level_supported(CpuLevel level) {
  return cpu_level_built(level) && static_cast<int>(level) <= static_cast<int>(cpu_capability());
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
  const std::string reason = unsupported_reason(level);
  DTR_CHECK(reason.empty(), "set_cpu_level({}): {}", cpu_level_name(level), reason);
  std::lock_guard<std::mutex> lock(g_resolve_mutex);
  g_level_source = "set_cpu_level";
  g_active_level.store(static_cast<int>(level));
}

}  // namespace dtr::kernels::cpu
