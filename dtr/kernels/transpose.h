// Transpose: whether a GEMM operand is read as stored or transposed. An enum
// rather than a bool, so a call site says which it means.
#pragma once

namespace dtr::kernels {

enum class Transpose { no, yes };

}  // namespace dtr::kernels
