// The instruction-set level the CPU kernels run at, chosen once per process.
//
// The kernels of kernels/cpu/ (all but the thread pool, the denormal mode and
// random init) are compiled once per level, each copy in a namespace of its own:
// baseline (x86-64, SSE2), avx2 (x86-64-v3: AVX2, FMA, BMI, F16C) and avx512
// (x86-64-v4: AVX-512 F/BW/CD/DQ/VL).
// The public functions in dtr::kernels::cpu call the copy of the active level.
// Each level's objects are linked into one relocatable object whose symbols are
// all local except that level's kernels, so the inline and template code they
// share (Eigen, the standard library) can never be resolved to another level's
// copy: a baseline run executes no AVX instruction (tests/kernels/ proves it
// under CPU emulation). Other architectures build only the baseline level.
//
// The level is the best the CPU and OS support, or the one the environment
// variable DTR_CPU_CAPABILITY (baseline, avx2 or avx512) names. It is resolved at
// the first kernel call and logged once (at debug level: DTR_LOG_LEVEL=debug;
// dtr-train and the benchmarks print it in their header lines).
#pragma once

#include <string>
#include <vector>

namespace dtr::kernels::cpu {

enum class CpuLevel { baseline, avx2, avx512 };

// "baseline", "avx2" or "avx512".
const char* cpu_level_name(CpuLevel level);

// Whether this build has the level's kernels (every level, unless CMake's
// DTR_CPU_LEVELS chose some).
bool cpu_level_built(CpuLevel level);

// Whether this build has the level's kernels and this CPU (and OS) can run them.
bool cpu_level_supported(CpuLevel level);

// The levels cpu_level_supported(), lowest first; baseline is one of them unless
// the build left it out. Empty when the build has only levels this CPU cannot run.
std::vector<CpuLevel> supported_cpu_levels();

// The level the kernels run at: the highest supported one, unless DTR_CPU_CAPABILITY
// names another. Throws dtr::Error when DTR_CPU_CAPABILITY names no level or one
// that is not supported, or when no level is; the next call tries again.
CpuLevel active_cpu_level();

// The active level and where it came from, e.g. "avx512 (detected)" or
// "baseline (DTR_CPU_CAPABILITY)", for log lines and benchmark headers.
std::string cpu_level_description();

// Makes `level` the active level from now on (tests and benchmarks compare
// levels in one process). Throws dtr::Error when it is not supported.
void set_cpu_level(CpuLevel level);

// Picks the function of the active level.
template <class F>
F* function_for_active_level(F* baseline, [[maybe_unused]] F* avx2, [[maybe_unused]] F* avx512) {
  switch (active_cpu_level()) {
    case CpuLevel::avx512: return avx512;
    case CpuLevel::avx2: return avx2;
    case CpuLevel::baseline: break;
  }
  return baseline;
}

}  // namespace dtr::kernels::cpu

// DTR_CPU_AT_EVERY_LEVEL(declarations...) repeats the declarations in each level's
// namespace; DTR_CPU_DISPATCH(function) is the function of the active level, e.g.
//   DTR_CPU_DISPATCH(softmax_rows<T>)(in, rows, cols, out);
// A kernel source defines its functions in namespace
// dtr::kernels::cpu::DTR_CPU_LEVEL, which the build sets per copy.
// A build may hold only some levels (DTR_CPU_LEVELS in CMake, e.g. just the build
// machine's): dtr::dtr then defines DTR_CPU_WITHOUT_<LEVEL> for each missing one,
// whose functions are declared but never referenced (a null pointer of their type
// stands in, and active_cpu_level() never picks such a level).
#if defined(DTR_CPU_WITHOUT_BASELINE)
#define DTR_CPU_BASELINE_FUNCTION(...) static_cast<decltype(&baseline::__VA_ARGS__)>(nullptr)
#else
#define DTR_CPU_BASELINE_FUNCTION(...) (&baseline::__VA_ARGS__)
#endif
#if defined(DTR_CPU_WITHOUT_AVX2)
#define DTR_CPU_AVX2_FUNCTION(...) static_cast<decltype(&avx2::__VA_ARGS__)>(nullptr)
#else
#define DTR_CPU_AVX2_FUNCTION(...) (&avx2::__VA_ARGS__)
#endif
#if defined(DTR_CPU_WITHOUT_AVX512)
#define DTR_CPU_AVX512_FUNCTION(...) static_cast<decltype(&avx512::__VA_ARGS__)>(nullptr)
#else
#define DTR_CPU_AVX512_FUNCTION(...) (&avx512::__VA_ARGS__)
#endif

#if defined(__x86_64__)
#define DTR_CPU_AT_EVERY_LEVEL(...)  \
  namespace baseline {               \
  __VA_ARGS__                        \
  }                                  \
  namespace avx2 {                   \
  __VA_ARGS__                        \
  }                                  \
  namespace avx512 {                 \
  __VA_ARGS__                        \
  }
#define DTR_CPU_DISPATCH(...)                                                                  \
  ::dtr::kernels::cpu::function_for_active_level(DTR_CPU_BASELINE_FUNCTION(__VA_ARGS__),       \
                                                 DTR_CPU_AVX2_FUNCTION(__VA_ARGS__),           \
                                                 DTR_CPU_AVX512_FUNCTION(__VA_ARGS__))
#else
#define DTR_CPU_AT_EVERY_LEVEL(...) \
  namespace baseline {              \
  __VA_ARGS__                       \
  }
#define DTR_CPU_DISPATCH(...) (&baseline::__VA_ARGS__)
#endif
