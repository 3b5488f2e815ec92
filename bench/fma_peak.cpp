#include "bench/fma_peak.h"

#include "dtr/kernels/cpu/cpu_level.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace dtr::bench {

namespace {

// Multiply-adds per loop iteration and chain: enough chains to cover the FMA latency
// (4 cycles) on two FMA ports with room to spare.
constexpr int kChains = 16;
constexpr long kIterations = 5'000'000;

// Each runs kChains chains of acc = acc * step + one for kIterations, keeps the sum
// alive through `sink` and returns the multiply-adds done. One function per level
// (an intrinsic needs its target on the function that calls it).
#define DTR_FMA_CHAINS(name, attributes, V, set1, madd, add)                     \
  attributes long name(float* sink) {                                           \
    const V one = set1(1.0f), step = set1(0.999999f);                           \
    V acc[kChains];                                                             \
    for (V& a : acc) a = one;                                                   \
    for (long i = 0; i < kIterations; ++i) {                                    \
      _Pragma("GCC unroll 16") for (V& a : acc) a = madd(a, step, one);         \
    }                                                                           \
    V total = acc[0];                                                           \
    for (int c = 1; c < kChains; ++c) total = add(total, acc[c]);               \
    float lanes[sizeof(V) / sizeof(float)];                                     \
    std::memcpy(lanes, &total, sizeof(V));                                      \
    *sink = lanes[0];                                                           \
    return kIterations * kChains * static_cast<long>(sizeof(V) / sizeof(float)); \
  }

// The baseline level: GCC's portable vectors of 4 floats, multiply then add (the
// host never contracts into FMAs).
using Float4 = float __attribute__((vector_size(16)));
Float4 splat4(float x) { return Float4{x, x, x, x}; }
Float4 madd4(Float4 a, Float4 b, Float4 c) { return a * b + c; }
Float4 add4(Float4 a, Float4 b) { return a + b; }
DTR_FMA_CHAINS(chains_baseline, , Float4, splat4, madd4, add4)

#if defined(__x86_64__)
DTR_FMA_CHAINS(chains_avx512, [[gnu::target("avx512f")]], __m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps)
DTR_FMA_CHAINS(chains_avx2, [[gnu::target("avx2,fma")]], __m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps)
#endif
#undef DTR_FMA_CHAINS

#if defined(__x86_64__)
// kChains chains of acc += a . b over bf16 pairs (1.0 . 2^-20, twice per lane).
[[gnu::target("avx512f,avx512bf16")]] long chains_bf16_dot(float* sink) {
  const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b = (__m512bh)_mm512_set1_epi32(0x35803580);
  __m512 acc[kChains];
  for (__m512& c : acc) c = _mm512_setzero_ps();
  for (long i = 0; i < kIterations; ++i) {
    _Pragma("GCC unroll 16") for (__m512& c : acc) c = _mm512_dpbf16_ps(c, a, b);
  }
  __m512 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm512_add_ps(total, acc[c]);
  float lanes[16];
  std::memcpy(lanes, &total, sizeof(total));
  *sink = lanes[0];
  return kIterations * kChains * 32;
}
#endif

// GFLOP/s of `threads` threads each running `chains`, best of 7 short runs (the clock varies).
double best_rate(int threads, long (*chains)(float*)) {
  double best = 0;
  for (int run = 0; run < 7; ++run) {
    std::vector<float> sinks(static_cast<size_t>(threads) * 16);  // a cache line each
    std::vector<long> counts(static_cast<size_t>(threads));
    std::vector<std::thread> workers;
    const auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] { counts[t] = chains(&sinks[t * 16]); });
    }
    for (auto& w : workers) w.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    long madds = 0;
    for (long c : counts) madds += c;
    best = std::max(best, 2.0 * static_cast<double>(madds) / seconds * 1e-9);
  }
  return best;
}

long chains_at_active_level(float* sink) {
#if defined(__x86_64__)
  switch (kernels::cpu::active_cpu_level()) {
    case kernels::cpu::CpuLevel::avx512: return chains_avx512(sink);
    case kernels::cpu::CpuLevel::avx2: return chains_avx2(sink);
    case kernels::cpu::CpuLevel::baseline: break;
  }
#endif
  return chains_baseline(sink);
}

}  // namespace

double measured_fma_peak_gflops(int threads) { return best_rate(threads, chains_at_active_level); }

double measured_bf16_dot_peak_gflops(int threads) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512bf16")) return best_rate(threads, chains_bf16_dot);
#endif
  return 0.0;
}

const char* cpu_model_name() {
  static const std::string name = [] {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("model name", 0) == 0) {
        const auto colon = line.find(':');
        if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
      }
    }
    return std::string("unknown CPU");
  }();
  return name.c_str();
}

}  // namespace dtr::bench
