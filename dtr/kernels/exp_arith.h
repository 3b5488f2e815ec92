// e^x in f32 from IEEE arithmetic alone, for the host's elementwise loops.
//
// A call to the C library's expf stops the compiler from vectorizing the loop it
// is in, and tanh-GELU (forward and backward) spends most of its time there. This
// exp is plain arithmetic, so those loops vectorize at every instruction-set
// level (its selects need the kernels' -fno-trapping-math below AVX-512), and since
// the host never contracts into FMAs (ISO mode, and the kernels' -ffp-contract=off)
// every level computes bitwise the same values.
//
// The method is Cephes' expf: x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts,
// the first exact in a product with n), e^r = 1 + r + r^2 p(r) with p of degree 5,
// then 2^n applied as two factors, so that results below the smallest normal keep
// their subnormal bits instead of flushing to zero. Within 1 ulp of e^x; +inf above
// 88.7228317 (the largest x whose e^x is a finite float), +0 below -103.972076 (the
// smallest x whose e^x does not round to zero), NaN for NaN.
#pragma once

#include "dtr/kernels/host_device.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>

namespace dtr::kernels {

DTR_FORCE_INLINE float exp_arith(float x) {
  constexpr float kMax = 88.72283172607421875f;
  constexpr float kMin = -103.972076416015625f;
  const bool nan = x != x;
  // Clamped (and NaN replaced) so that n below fits the exponent arithmetic.
  const float xc = nan ? 0.0f : std::min(std::max(x, kMin), kMax);
  // n = x / ln2 rounded to nearest: adding and subtracting 1.5 * 2^23 drops the
  // fraction (|x / ln2| < 2^22), where floor() would stop the loop vectorizing.
  constexpr float kRound = 12582912.0f;
  const float n = (xc * 1.44269504088896341f + kRound) - kRound;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e_r = p * (r * r) + r + 1.0f;
  // n in [-150, 128]: each half in [-75, 64] is a normal power of two.
  const int32_t n_total = static_cast<int32_t>(n);
  const int32_t n_half = n_total / 2;
  const float scale_a = std::bit_cast<float>((n_half + 127) << 23);
  const float scale_b = std::bit_cast<float>((n_total - n_half + 127) << 23);
  float y = e_r * scale_a * scale_b;
  y = x > kMax ? std::numeric_limits<float>::infinity() : y;
  y = x < kMin ? 0.0f : y;
  return nan ? x : y;
}

}  // namespace dtr::kernels
