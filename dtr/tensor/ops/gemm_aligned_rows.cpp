#include "dtr/tensor/ops/gemm_aligned_rows.h"

#include "dtr/tensor/factory.h"

namespace dtr::ops {

bool gemm_wants_aligned_rows(DType dtype, int64_t rows, int64_t cols) {
  return element_size(dtype) == 2 && rows * cols >= kGemmAlignedRowsMinElements;
}

int64_t gemm_row_stride(DType dtype, int64_t rows, int64_t cols) {
  if (!gemm_wants_aligned_rows(dtype, rows, cols)) return cols;
  const auto per_16_bytes = static_cast<int64_t>(16 / element_size(dtype));
  return (cols + per_16_bytes - 1) / per_16_bytes * per_16_bytes;
}

Tensor empty_with_gemm_aligned_rows(const Shape& sizes, const TensorOptions& options) {
  if (!options.device.is_cuda() || sizes.size() < 2) return empty(sizes, options);
  const int64_t rows = sizes[sizes.size() - 2], cols = sizes.back();
  const int64_t ld = gemm_row_stride(options.dtype, rows, cols);
  if (ld == cols) return empty(sizes, options);
  Shape padded = sizes;
  padded.back() = ld;
  return empty(padded, options).narrow(-1, 0, cols);
}

}  // namespace dtr::ops
