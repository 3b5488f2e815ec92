// CUDA block_quantize / block_dequantize against the CPU kernels on the same
// inputs, bit for bit (the per-element math is shared: dtr/kernels/block_quantize.h):
// int8 and int4, f32 and bf16 in and out, blocks of 256 and 2, a short last
// block, a block with a NaN and one with an infinity, and a block of zeros.
// Inputs are fresh random values each run (the seed is printed on failure).
#include "tests/support/gpu_test_support.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/quantize.h"

#include <catch2/catch.hpp>

#include <limits>
#include <random>
#include <vector>

using namespace dtr;
using namespace dtr::testing::gpu;

TEST_CASE("CUDA block quantization gives the CPU kernels' codes, absmax values and dequantized bits",
          "[gpu][quantize]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  for (const DType dtype : {DType::f32, DType::bf16}) {
    Tensor cpu = random_cpu({5003}, dtype, gen, -4, 4);
    auto values = cpu.to(DType::f32).to_vector<float>();
    values[600] = std::numeric_limits<float>::quiet_NaN();
    values[1100] = -std::numeric_limits<float>::infinity();
    for (int i = 1536; i < 1792; ++i) values[static_cast<size_t>(i)] = 0.0f;
    cpu = from_vector(values, {5003}).to(dtype);
    const Tensor gpu = cpu.to(kGpu);
    for (const int bits : {8, 4}) {
      for (const int64_t block : {256, 2}) {
        INFO(name_of(dtype) << " int" << bits << " blocks of " << block);
        const BlockQuantized want = block_quantize(cpu, block, bits);
        const BlockQuantized got = block_quantize(gpu, block, bits);
        CHECK(same_bits(got.codes.to(kCpu), want.codes));
        CHECK(same_bits(got.absmax.to(kCpu), want.absmax));
        for (const DType out : {DType::f32, DType::bf16}) {
          CHECK(same_bits(block_dequantize(got, {5003}, out).to(kCpu), block_dequantize(want, {5003}, out)));
        }
      }
    }
  }
}
