// IntDivider32: exact unsigned 32-bit division by a divisor fixed in advance, as
// one multiply-high, one add and one shift (Granlund & Montgomery, "Division by
// invariant integers using multiplication", 1994, section 4). Built on the host
// once per divisor; divides on the host and in CUDA device code alike. CUDA
// kernels use it instead of 64-bit `/` and `%`, which are long software routines
// on NVIDIA GPUs.
//
// The math. For a divisor d in [1, 2^31] let s = ceil(log2 d), so that
// 2^(s-1) < d <= 2^s (s = 0 for d = 1), and
//     m = floor(2^32 * (2^s - d) / d) + 1,   which lies in [1, 2^32 - 1].
// The full multiplier M = 2^32 + m equals floor(2^(32+s) / d) + 1, hence
//     M * d = 2^(32+s) + e   with   0 < e <= d <= 2^s.
// For a dividend n = q*d + r (0 <= r < d) with n < 2^32:
//     n * M / 2^(32+s) = q + r/d + n*e / (d * 2^(32+s)),
// and n*e < 2^32 * 2^s makes the last term < 1/d, so the fractional part stays
// below (r + 1)/d <= 1: floor(n * M / 2^(32+s)) = q exactly. Splitting M,
//     q = (umulhi(n, m) + n) >> s,
// where umulhi(n, m) = floor(n * m / 2^32) < n. The sum is formed in 32 bits, so
// it must not wrap: n <= 2^31 keeps it below 2^32. Hence the range:
//     divisors in [1, 2^31], dividends in [0, 2^31] (kMaxDividend).
// The remainder is n - q * d.
#pragma once

#include "dtr/kernels/host_device.h"

#include <cstdint>

namespace dtr::kernels {

struct DivMod32 {
  uint32_t quot;
  uint32_t rem;
};

class IntDivider32 {
 public:
  static constexpr uint32_t kMaxDivisor = uint32_t{1} << 31;
  static constexpr uint32_t kMaxDividend = uint32_t{1} << 31;

  // Divides by 1.
  constexpr IntDivider32() = default;

  // Precondition: 1 <= d <= kMaxDivisor (not checked here; callers guarantee it).
  constexpr explicit IntDivider32(uint32_t d) : divisor_(d) {
    uint32_t s = 0;
    while ((uint64_t{1} << s) < d) ++s;
    shift_ = s;
    // 2^s - d < 2^(s-1) <= 2^30, so the product stays below 2^62.
    magic_ = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << s) - d)) / d + 1);
  }

  constexpr uint32_t divisor() const { return divisor_; }
  constexpr uint32_t magic() const { return magic_; }
  constexpr uint32_t shift() const { return shift_; }

  // n / d, for n in [0, kMaxDividend].
  DTR_HOST_DEVICE uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t t = __umulhi(n, magic_);
#else
    const uint32_t t = static_cast<uint32_t>((uint64_t{n} * magic_) >> 32);
#endif
    return (t + n) >> shift_;
  }

  // {n / d, n % d}, for n in [0, kMaxDividend].
  DTR_HOST_DEVICE DivMod32 divmod(uint32_t n) const {
    const uint32_t q = div(n);
    return {q, n - q * divisor_};
  }

 private:
  uint32_t divisor_ = 1;
  uint32_t magic_ = 1;  // d = 1: s = 0, m = 1, and umulhi(n, 1) = 0, so q = n
  uint32_t shift_ = 0;
};

}  // namespace dtr::kernels
