#include "dtr/kernels/cpu/denormals.h"

#include <atomic>
#include <cstdint>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace dtr::kernels {

namespace {

std::atomic<bool> g_flush{false};

#if defined(__x86_64__)
constexpr unsigned kFlushBits = 0x8040;  // MXCSR: FTZ (bit 15) and DAZ (bit 6)
void set_thread_mode(bool on) {
  const unsigned csr = _mm_getcsr();
  const unsigned wanted = on ? (csr | kFlushBits) : (csr & ~kFlushBits);
  if (wanted != csr) _mm_setcsr(wanted);
}
constexpr bool kSupported = true;
#elif defined(__aarch64__)
constexpr uint64_t kFlushBit = uint64_t{1} << 24;  // FPCR.FZ
void set_thread_mode(bool on) {
  uint64_t fpcr = 0;
  __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
  const uint64_t wanted = on ? (fpcr | kFlushBit) : (fpcr & ~kFlushBit);
  if (wanted != fpcr) __asm__ volatile("msr fpcr, %0" : : "r"(wanted));
}
constexpr bool kSupported = true;
#else
void set_thread_mode(bool) {}
constexpr bool kSupported = false;
#endif

}  // namespace

bool set_flush_denormal(bool on) {
  if (!kSupported) return false;
  g_flush.store(on, std::memory_order_relaxed);
  set_thread_mode(on);
  return true;
}

bool flush_denormal() { return g_flush.load(std::memory_order_relaxed); }

void apply_flush_denormal_mode() {
  if (kSupported) set_thread_mode(g_flush.load(std::memory_order_relaxed));
}

}  // namespace dtr::kernels
