// Internal to tensor/ops: the one rule for when a matrix the CUDA GEMMs read should
// have 16-byte aligned rows, and how wide those rows are. matmul.cpp copies an operand
// that breaks it into such rows; producers of large GEMM operands allocate them that
// way to begin with (cross_entropy's backward writes dlogits into padded rows, which
// GPT-2's tied head then reads in place: no 0.8 GB copy per step).
//
// Why: the tensor-core paths (wgmma's copy engine, mma.sync's cp.async) read only
// 16-byte aligned pointers and row strides; otherwise the GEMM falls back to
// element-wise guarded loads, which ran GPT-2's tied head backward (dlogits [8192,
// 50257] bf16, rows of 100514 bytes) at ~27 TFLOP/s on an H100, 47 ms of a 90 ms step.
// Only 16-bit (bf16, f16) matrices of at least kGemmAlignedRowsMinElements elements
// qualify: below that a copy costs more than the slow loads, and f32 / f64 GEMMs do not
// take these paths.
#pragma once

#include "dtr/tensor/tensor.h"

#include <cstdint>

namespace dtr::ops {

inline constexpr int64_t kGemmAlignedRowsMinElements = int64_t{1} << 20;

// Whether the cuda GEMMs want a [rows, cols] matrix of `dtype` (one matrix: the last two
// dims of a batch) stored with 16-byte aligned rows: 16-bit and at least
// kGemmAlignedRowsMinElements elements. Says nothing about the device: callers decide
// that this is a cuda matrix.
bool gemm_wants_aligned_rows(DType dtype, int64_t rows, int64_t cols);

// The row stride, in elements, of a new [rows, cols] matrix of `dtype` that the cuda
// GEMMs read in place: cols rounded up to a multiple of 16 bytes when
// gemm_wants_aligned_rows, else cols (bf16 [8192, 50257]: 50264; f32: 50257).
int64_t gemm_row_stride(DType dtype, int64_t rows, int64_t cols);

// A new, uninitialised tensor of `sizes`. On a cuda device, with at least 2 dims and a
// gemm_row_stride wider than the last dim, it is the narrow() view [..., rows, cols] of
// a [..., rows, gemm_row_stride] buffer (16-byte aligned rows; the pad columns are
// never written or read). Otherwise (cpu, meta, already aligned) it is contiguous.
Tensor empty_with_gemm_aligned_rows(const Shape& sizes, const TensorOptions& options);

}  // namespace dtr::ops
