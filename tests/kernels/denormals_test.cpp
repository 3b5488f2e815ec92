// Flush-to-zero of subnormals (dtr/kernels/cpu/denormals.h): off, a product that is
// subnormal stays subnormal and a subnormal input counts; on, both read as zero,
// on the calling thread and in the thread pool's tasks alike. Reference values by
// hand: 2^-130 is subnormal in f32 (the smallest normal is 2^-126).
#include "dtr/kernels/cpu/denormals.h"
#include "dtr/kernels/cpu/elementwise.h"
#include "dtr/kernels/cpu/parallel.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

using namespace dtr;
using namespace dtr::kernels;

namespace {

struct Restore {
  int threads = num_threads();
  ~Restore() {
    set_flush_denormal(false);
    set_num_threads(threads);
  }
};

// x * y over n elements through the CPU kernel (split across the pool when large).
std::vector<float> multiply(float x, float y, int64_t n) {
  std::vector<float> a(n, x), b(n, y), out(n, -1.0f);
  const int64_t sizes[1] = {n}, strides[1] = {1};
  cpu::binary<float>(cpu::BinaryOp::mul, 1, sizes, a.data(), strides, b.data(), strides, out.data(),
                     strides);
  return out;
}

bool all_equal(const std::vector<float>& v, float expected) {
  for (float x : v) {
    if (x != expected) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("set_flush_denormal flushes subnormal results and inputs to zero, in the pool too",
          "[kernels][denormals]") {
  Restore restore;
  set_num_threads(2);
  const float subnormal = std::ldexp(1.0f, -130);
  REQUIRE(std::fpclassify(subnormal) == FP_SUBNORMAL);
  const int64_t small = 16, large = 4 * kParallelGrain;  // inline, and split across threads

  REQUIRE_FALSE(flush_denormal());
  for (int64_t n : {small, large}) {
    INFO(n << " elements");
    CHECK(all_equal(multiply(std::ldexp(1.0f, -100), std::ldexp(1.0f, -30), n), subnormal));
    CHECK(all_equal(multiply(subnormal, 4.0f, n), std::ldexp(1.0f, -128)));
  }

#if defined(__x86_64__) || defined(__aarch64__)
  REQUIRE(set_flush_denormal(true));
  CHECK(flush_denormal());
  for (int64_t n : {small, large}) {
    INFO(n << " elements");
    CHECK(all_equal(multiply(std::ldexp(1.0f, -100), std::ldexp(1.0f, -30), n), 0.0f));
    CHECK(all_equal(multiply(std::ldexp(1.0f, -100), std::ldexp(1.0f, -20), n),
                    std::ldexp(1.0f, -120)));  // normal results are untouched
  }
#if defined(__x86_64__)
  // Subnormal inputs read as zero (DAZ; aarch64's FZ flushes outputs only).
  CHECK(all_equal(multiply(subnormal, 4.0f, large), 0.0f));
#endif
  REQUIRE(set_flush_denormal(false));
  CHECK(all_equal(multiply(std::ldexp(1.0f, -100), std::ldexp(1.0f, -30), large), subnormal));
#else
  CHECK_FALSE(set_flush_denormal(true));
  WARN("no flush-to-zero mode on this architecture: set_flush_denormal returns false");
#endif
}
