// exp_arith (dtr/kernels/exp_arith.h) against exp in double: its stated accuracy
// over the whole finite range, subnormal results included, and its edges.
#include "dtr/kernels/exp_arith.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

using dtr::kernels::exp_arith;

namespace {

constexpr float kMax = 88.72283172607421875f;  // the largest x whose e^x is a finite float
constexpr float kMin = -103.972076416015625f;  // the smallest x whose e^x does not round to zero

// |got - exact| in units of the float spacing at the exact value (the smallest
// subnormal's below the normal range).
double ulp_error(float got, double exact) {
  const float rounded = static_cast<float>(exact);
  const double spacing =
      std::max(static_cast<double>(std::nextafter(rounded, std::numeric_limits<float>::infinity()) - rounded),
               static_cast<double>(std::numeric_limits<float>::denorm_min()));
  return std::abs(static_cast<double>(got) - exact) / spacing;
}

}  // namespace

TEST_CASE("exp_arith is within 1 ulp of e^x over every 61st float from the lower to the upper limit") {
  double worst_normal = 0, worst_subnormal = 0;
  int64_t checked = 0;
  for (float lo_hi : {kMin, kMax}) {
    // Walk the bit patterns from 0 towards each limit (negative and positive x).
    const uint32_t end = std::bit_cast<uint32_t>(lo_hi);
    const uint32_t sign = end & 0x80000000u;
    for (uint32_t bits = sign; bits <= end; bits += 61) {
      const float x = std::bit_cast<float>(bits);
      const double exact = std::exp(static_cast<double>(x));
      const double err = ulp_error(exp_arith(x), exact);
      if (exact < std::numeric_limits<float>::min()) {
        worst_subnormal = std::max(worst_subnormal, err);
      } else {
        worst_normal = std::max(worst_normal, err);
      }
      ++checked;
    }
  }
  INFO(checked << " values; worst " << worst_normal << " ulp (normal results), " << worst_subnormal
               << " ulp (subnormal)");
  CHECK(checked > 30'000'000);
  CHECK(worst_normal <= 1.0);
  CHECK(worst_subnormal <= 1.0);
}

TEST_CASE("exp_arith at its edges: overflow, underflow, infinities, NaN, zero") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(exp_arith(0.0f) == 1.0f);
  CHECK(exp_arith(-0.0f) == 1.0f);
  CHECK(std::isfinite(exp_arith(kMax)));
  CHECK(exp_arith(std::nextafter(kMax, inf)) == inf);
  CHECK(exp_arith(1000.0f) == inf);
  CHECK(exp_arith(inf) == inf);
  CHECK(exp_arith(kMin) == std::numeric_limits<float>::denorm_min());
  CHECK(exp_arith(std::nextafter(kMin, -inf)) == 0.0f);
  CHECK(exp_arith(-1000.0f) == 0.0f);
  CHECK(exp_arith(-inf) == 0.0f);
  CHECK(std::isnan(exp_arith(std::numeric_limits<float>::quiet_NaN())));
  CHECK(std::isnan(exp_arith(-std::numeric_limits<float>::quiet_NaN())));
}
