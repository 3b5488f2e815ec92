// Input checks and shape rules shared by the ops in dtensor/ops/: the same
// device and dtype for every operand, NumPy broadcasting, and the "where does
// this op run" decision (cpu kernels, or nothing to compute on meta).
#pragma once

#include "dtensor/tensor.h"

#include <initializer_list>
#include <string_view>

namespace dtr::ops {

// Every operand is defined and on the same device; returns that device.
// Devices without kernels in this build get a clear error naming the op.
Device check_device(std::string_view op, std::initializer_list<const Tensor*> operands);

// Every operand has the same dtype; returns it.
DType check_same_dtype(std::string_view op, std::initializer_list<const Tensor*> operands);

// NumPy broadcasting of two shapes, e.g. [4, 1, 3] and [5, 1] -> [4, 5, 3]; the error
// names the op, both shapes and the dim that does not match.
Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b);

}  // namespace dtr::ops
