// DType names and sizes; bf16 and f16 conversions against hand-computed bit patterns.
#include "dtr/tensor/dtype.h"

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

using namespace dtr;

namespace {
uint16_t bits_of(bf16 v) { return std::bit_cast<uint16_t>(v); }
uint16_t bits_of(f16 v) { return std::bit_cast<uint16_t>(v); }
float float_from_bits(uint32_t b) { return std::bit_cast<float>(b); }
}  // namespace

TEST_CASE("dtype names, sizes and parsing round-trip", "[dtype]") {
  CHECK(element_size(DType::f32) == 4);
  CHECK(element_size(DType::f64) == 8);
  CHECK(element_size(DType::bf16) == 2);
  CHECK(element_size(DType::f16) == 2);
  CHECK(element_size(DType::i32) == 4);
  CHECK(element_size(DType::i64) == 8);
  CHECK(element_size(DType::u8) == 1);
  for (int i = 0; i < kNumDTypes; ++i) {
    auto d = static_cast<DType>(i);
    CHECK(parse_dtype(dtype_name(d)) == d);
  }
  CHECK_THROWS_WITH(parse_dtype("float99"), Catch::Contains("unknown dtype 'float99'"));
  CHECK(is_floating(DType::bf16));
  CHECK_FALSE(is_floating(DType::i64));
}

TEST_CASE("bf16 rounds to nearest even", "[dtype][bf16]") {
  // 1.0f is 0x3F800000; bf16 keeps the top 16 bits.
  CHECK(bits_of(bf16(1.0f)) == 0x3F80);
  // Exactly halfway between 0x3F80 and 0x3F81: ties go to the even mantissa (0x3F80).
  CHECK(bits_of(bf16(float_from_bits(0x3F808000))) == 0x3F80);
  // Halfway between 0x3F81 and 0x3F82: ties go to 0x3F82.
  CHECK(bits_of(bf16(float_from_bits(0x3F818000))) == 0x3F82);
  // Just above halfway rounds up; just below rounds down.
  CHECK(bits_of(bf16(float_from_bits(0x3F808001))) == 0x3F81);
  CHECK(bits_of(bf16(float_from_bits(0x3F807FFF))) == 0x3F80);
  // Rounding that carries into the exponent: largest mantissa + half ulp.
  CHECK(bits_of(bf16(float_from_bits(0x3FFFC000))) == 0x4000);
  // Overflow past the largest finite bf16 rounds to +Inf.
  CHECK(bits_of(bf16(float_from_bits(0x7F7FFFFF))) == 0x7F80);
}

TEST_CASE("bf16 keeps NaN, Inf, signed zero and subnormals", "[dtype][bf16]") {
  CHECK(std::isnan(static_cast<float>(bf16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload lives only in the low bits must stay NaN, not become Inf.
  CHECK(std::isnan(static_cast<float>(bf16(float_from_bits(0x7F800001)))));
  CHECK(bits_of(bf16(std::numeric_limits<float>::infinity())) == 0x7F80);
  CHECK(bits_of(bf16(-std::numeric_limits<float>::infinity())) == 0xFF80);
  CHECK(bits_of(bf16(-0.0f)) == 0x8000);
  // The smallest float subnormal with bits in the kept part survives.
  CHECK(bits_of(bf16(float_from_bits(0x00010000))) == 0x0001);
  CHECK(static_cast<float>(bf16(float_from_bits(0x00010000))) == float_from_bits(0x00010000));
}

TEST_CASE("f16 rounds to nearest even and handles the edges", "[dtype][f16]") {
  CHECK(bits_of(f16(1.0f)) == 0x3C00);
  CHECK(bits_of(f16(65504.0f)) == 0x7BFF);  // largest finite half
  // 1 + 2^-11 is exactly halfway between 1 and the next half (1 + 2^-10): ties to even -> 1.
  CHECK(bits_of(f16(1.0f + std::ldexp(1.0f, -11))) == 0x3C00);
  // 1 + 3*2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even) -> 1+2^-9.
  CHECK(bits_of(f16(1.0f + 3 * std::ldexp(1.0f, -11))) == 0x3C02);
  // 65520 is halfway between 65504 and 65536 (=Inf in half): rounds to Inf.
  CHECK(bits_of(f16(65520.0f)) == 0x7C00);
  CHECK(bits_of(f16(65519.0f)) == 0x7BFF);
  // Smallest half subnormal 2^-24, and half of it rounds to zero (tie to even).
  CHECK(bits_of(f16(std::ldexp(1.0f, -24))) == 0x0001);
  CHECK(bits_of(f16(std::ldexp(1.0f, -25))) == 0x0000);
  CHECK(bits_of(f16(std::ldexp(3.0f, -26))) == 0x0001);  // 0.75 ulp rounds up
  CHECK(std::isnan(static_cast<float>(f16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(bits_of(f16(-std::numeric_limits<float>::infinity())) == 0xFC00);
  CHECK(bits_of(f16(-0.0f)) == 0x8000);
}

TEST_CASE("convert<> goes through float for half types", "[dtype]") {
  CHECK(convert<double>(bf16(0.5f)) == 0.5);
  CHECK(bits_of(convert<bf16>(f16(1.0f))) == 0x3F80);
  CHECK(convert<int64_t>(bf16(3.0f)) == 3);
  CHECK(static_cast<float>(convert<f16>(int32_t{-2})) == -2.0f);
}

TEST_CASE("double -> bf16/f16 rounds once, not twice through float", "[dtype]") {
  // 1 + 2^-8 + 2^-30 is just above the bf16 tie between 1 and 1 + 2^-7; rounding to
  // float first would drop the 2^-30 and land on the tie, which goes to even (1).
  const double x = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  CHECK(bits_of(convert<bf16>(x)) == 0x3F81);
  CHECK(bits_of(convert<bf16>(-x)) == 0xBF81);
  // The same for f16: a tie at 1 + 2^-11 nudged up by 2^-40.
  CHECK(bits_of(convert<f16>(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40))) == 0x3C01);
  // Exactly representable values and the tie itself are unaffected.
  CHECK(bits_of(convert<bf16>(1.0 + std::ldexp(1.0, -8))) == 0x3F80);
  CHECK(bits_of(convert<bf16>(1e300)) == 0x7F80);  // beyond float: +Inf
  CHECK(std::isnan(static_cast<float>(convert<bf16>(std::nan("")))));
}
