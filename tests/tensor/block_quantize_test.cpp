// block_quantize / block_dequantize (dtr/tensor/ops/quantize.h) on the CPU
// against a reference written here in double precision: every element within
// half a quantization step (absmax / qmax / 2) of its value, the codes those of
// the reference (nearest, ties to even) wherever the reference is not within
// float rounding of a tie, the int4 nibbles packed low first; values on the grid,
// blocks of zeros and blocks of one value exact; a NaN or an infinity makes its
// block (and only its block) NaN; a last block shorter than the others; bf16 in
// and out; and the errors for bad block sizes, bit counts and dtypes.
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/quantize.h"
#include "dtr/tensor/random.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

using namespace dtr;

namespace {

struct QuantReference {
  std::vector<double> absmax;
  std::vector<int> codes;
};

// The reference: per block the largest magnitude, per element x / absmax * qmax
// rounded to nearest, ties to even (in double).
QuantReference quant_reference(const std::vector<float>& x, int64_t block, int qmax) {
  QuantReference r;
  for (size_t begin = 0; begin < x.size(); begin += static_cast<size_t>(block)) {
    const size_t end = std::min(x.size(), begin + static_cast<size_t>(block));
    double m = 0;
    for (size_t i = begin; i < end; ++i) m = std::max(m, std::abs(static_cast<double>(x[i])));
    r.absmax.push_back(m);
    for (size_t i = begin; i < end; ++i) {
      r.codes.push_back(m == 0 ? 0 : static_cast<int>(std::nearbyint(static_cast<double>(x[i]) / m * qmax)));
    }
  }
  return r;
}

// The codes as integers, from the packed bytes.
std::vector<int> unpack_codes(const BlockQuantized& q) {
  const auto bytes = q.codes.to_vector<uint8_t>();
  std::vector<int> codes;
  for (int64_t i = 0; i < q.numel; ++i) {
    if (q.bits == 8) {
      codes.push_back(static_cast<int8_t>(bytes[static_cast<size_t>(i)]));
    } else {
      const unsigned nibble = (bytes[static_cast<size_t>(i / 2)] >> (i % 2 == 0 ? 0 : 4)) & 0xFu;
      codes.push_back(nibble >= 8 ? static_cast<int>(nibble) - 16 : static_cast<int>(nibble));
    }
  }
  return codes;
}

std::vector<float> random_values(int64_t n, uint64_t seed) {
  manual_seed(seed);
  std::vector<float> x = randn({n}).to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i) x[i] *= static_cast<float>(1 + i % 7);  // blocks of other scales
  return x;
}

}  // namespace

TEST_CASE("block_quantize keeps every element within half a step of its value", "[tensor][quantize]") {
  for (const int bits : {8, 4}) {
    for (const int64_t block : {256, 64, 2}) {
      const int qmax = bits == 8 ? 127 : 7;
      const int64_t n = 1000;  // not a multiple of any block: a short last block
      const std::vector<float> x = random_values(n, 7 + static_cast<uint64_t>(block));
      const BlockQuantized q = block_quantize(from_vector(x, {n}), block, bits);
      INFO("int" << bits << ", blocks of " << block);
      REQUIRE(q.codes.numel() == (bits == 8 ? n : (n + 1) / 2));
      REQUIRE(q.absmax.numel() == (n + block - 1) / block);
      const QuantReference want = quant_reference(x, block, qmax);
      const auto absmax = q.absmax.to_vector<float>();
      const auto codes = unpack_codes(q);
      const auto back = block_dequantize(q, {n}, DType::f32).to_vector<float>();
      for (int64_t i = 0; i < n; ++i) {
        const size_t b = static_cast<size_t>(i / block), k = static_cast<size_t>(i);
        CHECK(absmax[b] == static_cast<float>(want.absmax[b]));
        const double step = want.absmax[b] / qmax;
        const double scaled = static_cast<double>(x[k]) / want.absmax[b] * qmax;
        // Away from a tie (within float rounding of one) the code is the reference's.
        if (std::abs(std::abs(scaled - std::floor(scaled)) - 0.5) > 1e-4) CHECK(codes[k] == want.codes[k]);
        CHECK(std::abs(codes[k]) <= qmax);
        CHECK(std::abs(static_cast<double>(back[k]) - x[k]) <= step / 2 * (1 + 1e-5));
      }
    }
  }
}

TEST_CASE("block_quantize is exact on the grid, on zeros and on blocks of one value", "[tensor][quantize]") {
  for (const int bits : {8, 4}) {
    const int qmax = bits == 8 ? 127 : 7;
    INFO("int" << bits);
    // Block 0: every grid value absmax * (k / qmax) for k in [-qmax, qmax], then k = 0 padding.
    // Block 1: zeros. Block 2: one value (negative). Block 3: one value, then -0.
    const int64_t block = 2 * 128;
    std::vector<float> x(static_cast<size_t>(4 * block), 0.0f);
    const float absmax = 3.3f;
    for (int k = -qmax; k <= qmax; ++k) x[static_cast<size_t>(k + qmax)] = absmax * (static_cast<float>(k) / qmax);
    for (int64_t i = 2 * block; i < 3 * block; ++i) x[static_cast<size_t>(i)] = -0.7071f;
    for (int64_t i = 3 * block; i < 4 * block - 1; ++i) x[static_cast<size_t>(i)] = 1e-30f;
    x.back() = -0.0f;
    const BlockQuantized q = block_quantize(from_vector(x, {static_cast<int64_t>(x.size())}), block, bits);
    const auto back = block_dequantize(q, {static_cast<int64_t>(x.size())}, DType::f32).to_vector<float>();
    for (size_t i = 0; i < x.size(); ++i) {
      INFO("element " << i);
      CHECK(back[i] == x[i]);
    }
    CHECK(q.absmax.to_vector<float>() == std::vector<float>{absmax, 0.0f, 0.7071f, 1e-30f});
  }
}

TEST_CASE("block_quantize turns a block with a NaN or an infinity into NaN, and only that block",
          "[tensor][quantize]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const float bad : {nan, inf, -inf}) {
    for (const int bits : {8, 4}) {
      INFO("int" << bits << " with " << bad);
      std::vector<float> x = random_values(12, 3);
      x[5] = bad;  // block 1 of blocks of 4
      const BlockQuantized q = block_quantize(from_vector(x, {12}), 4, bits);
      const auto absmax = q.absmax.to_vector<float>();
      CHECK(std::isfinite(absmax[0]));
      CHECK(std::isnan(absmax[1]));
      CHECK(std::isfinite(absmax[2]));
      const auto back = block_dequantize(q, {12}, DType::f32).to_vector<float>();
      for (size_t i = 0; i < back.size(); ++i) {
        INFO("element " << i);
        CHECK(std::isnan(back[i]) == (i >= 4 && i < 8));
      }
    }
  }
}

TEST_CASE("block_quantize takes bf16 and gives bf16, rounded once", "[tensor][quantize]") {
  const std::vector<float> x = random_values(300, 11);
  const Tensor values = from_vector(x, {300});
  const BlockQuantized from_f32 = block_quantize(values, 64, 8);
  const BlockQuantized from_bf16 = block_quantize(values.to(DType::bf16), 64, 8);
  // bf16 input: the f32 kernel on the bf16-rounded values.
  const BlockQuantized from_rounded = block_quantize(values.to(DType::bf16).to(DType::f32), 64, 8);
  CHECK(from_bf16.codes.to_vector<uint8_t>() == from_rounded.codes.to_vector<uint8_t>());
  CHECK(from_bf16.absmax.to_vector<float>() == from_rounded.absmax.to_vector<float>());
  // bf16 output: the f32 result rounded to bf16.
  const Tensor f32_back = block_dequantize(from_f32, {300}, DType::f32);
  const Tensor bf16_back = block_dequantize(from_f32, {300}, DType::bf16);
  REQUIRE(bf16_back.dtype() == DType::bf16);
  CHECK(bf16_back.to(DType::f32).to_vector<float>() == f32_back.to(DType::bf16).to(DType::f32).to_vector<float>());
}

TEST_CASE("block_quantize refuses odd blocks, other bit counts, other dtypes and a wrong output",
          "[tensor][quantize]") {
  const Tensor x = from_vector(std::vector<float>{1, 2, 3, 4}, {4});
  CHECK_THROWS_WITH(block_quantize(x, 3, 8), Catch::Contains("expected an even, positive block size, got 3"));
  CHECK_THROWS_WITH(block_quantize(x, 0, 8), Catch::Contains("expected an even, positive block size, got 0"));
  CHECK_THROWS_WITH(block_quantize(x, 2, 2), Catch::Contains("expected 8 or 4 bits per code, got 2"));
  CHECK_THROWS_WITH(block_quantize(x.to(DType::f64), 2, 8), Catch::Contains("expected f32 or bf16 values, got f64"));
  const BlockQuantized q = block_quantize(x, 2, 8);
  CHECK_THROWS_WITH(block_dequantize(q, {5}, DType::f32), Catch::Contains("shape [5] has 5 elements, the codes hold 4"));
  CHECK_THROWS_WITH(block_dequantize(q, {4}, DType::i64), Catch::Contains("expected f32 or bf16 values, got i64"));
  BlockQuantized cut = q;
  cut.absmax = cut.absmax.narrow(0, 0, 1).contiguous();
  CHECK_THROWS_WITH(block_dequantize(cut, {4}, DType::f32), Catch::Contains("need 4 code bytes and 2 absmax values"));
}
