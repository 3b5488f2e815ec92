// The padded-row rule of dtensor/ops/gemm_aligned_rows.h (shared by matmul's operand
// copies and the producers of large GEMM operands) against hand-computed strides.
#include "dtensor/factory.h"
#include "dtensor/ops/gemm_aligned_rows.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

using namespace dtr;

TEST_CASE("gemm_row_stride pads large 16-bit rows to 16 bytes and leaves others alone", "[matmul]") {
  using ops::gemm_row_stride;
  // GPT-2's logits [8192, 50257]: 50257 rounded up to a multiple of 8 is 50264.
  CHECK(gemm_row_stride(DType::bf16, 8192, 50257) == 50264);
  CHECK(gemm_row_stride(DType::f16, 8192, 50257) == 50264);
  // 1024 x 1025 = 1049600 >= 2^20 = 1048576: 1025 -> 1032.
  CHECK(gemm_row_stride(DType::bf16, 1024, 1025) == 1032);
  CHECK(gemm_row_stride(DType::f16, 1025, 1024 + 1) == 1032);
  // 1023 x 1025 = 1048575, one element short of 2^20: not padded.
  CHECK(gemm_row_stride(DType::bf16, 1023, 1025) == 1025);
  // Exactly 2^20 elements qualifies: 1 x 1048577 -> 1048584, 8 x 131073 -> 131080.
  CHECK(gemm_row_stride(DType::bf16, 1, 1048577) == 1048584);
  CHECK(gemm_row_stride(DType::bf16, 8, 131073) == 131080);
  // Rows already a multiple of 8 elements keep their width.
  CHECK(gemm_row_stride(DType::bf16, 8192, 50264) == 50264);
  CHECK(gemm_row_stride(DType::f16, 4096, 4096) == 4096);
  // Other element sizes: never padded (no tensor-core path reads them).
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64, DType::u8}) {
    CAPTURE(std::string(dtype_name(dtype)));
    CHECK(gemm_row_stride(dtype, 8192, 50257) == 50257);
  }
  CHECK(gemm_row_stride(DType::bf16, 0, 50257) == 50257);
  CHECK(ops::gemm_wants_aligned_rows(DType::bf16, 1024, 1024));
  CHECK_FALSE(ops::gemm_wants_aligned_rows(DType::bf16, 1024, 1023));
  CHECK_FALSE(ops::gemm_wants_aligned_rows(DType::f32, 8192, 50257));
}

TEST_CASE("empty_with_gemm_aligned_rows is contiguous off cuda", "[matmul]") {
  // Only cuda tensors are padded; the cpu and meta get plain contiguous tensors.
  for (Device device : {Device::cpu(), Device::meta()}) {
    const Tensor t = ops::empty_with_gemm_aligned_rows({1024, 1025}, {.dtype = DType::bf16, .device = device});
    CHECK(t.sizes() == Shape{1024, 1025});
    CHECK(t.strides() == Shape{1025, 1});
    CHECK(t.dtype() == DType::bf16);
    CHECK(t.device() == device);
  }
  CHECK(ops::empty_with_gemm_aligned_rows({5}, {.dtype = DType::bf16}).sizes() == Shape{5});
}
