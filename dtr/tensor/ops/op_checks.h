// Input checks and shape rules shared by the ops in tensor/ops/: the same
// device and dtype for every operand, NumPy broadcasting, and the "where does
// this op run" decision (cpu kernels, or nothing to compute on meta).
#pragma once

#include "dtr/tensor/tensor.h"

#include <initializer_list>
#include <string_view>

namespace dtr::ops {

// Which devices an op has kernels for (meta is always accepted: shapes only).
enum class Kernels { cpu, cpu_and_cuda };

// Every operand is defined and on the same device; returns that device. A device
// the op has no kernel for (in this build) gets a clear error naming the op.
Device check_device(std::string_view op, std::initializer_list<const Tensor*> operands,
                    Kernels kernels = Kernels::cpu);

// Every operand has the same dtype; returns it.
DType check_same_dtype(std::string_view op, std::initializer_list<const Tensor*> operands);

// NumPy broadcasting of two shapes, e.g. [4, 1, 3] and [5, 1] -> [4, 5, 3]; the error
// names the op, both shapes and the dim that does not match.
Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b);

}  // namespace dtr::ops
