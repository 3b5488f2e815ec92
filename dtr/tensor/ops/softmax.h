// softmax and log_softmax of a Tensor along one dim (the last by default), for
// floating dtypes, like torch.softmax / torch.log_softmax. Computed max-
// subtracted in float (double for f64), so large inputs do not overflow.
// Results are new contiguous tensors of the input's shape and dtype; a 0-d
// input (dim 0 or -1) gives 1 (softmax) or 0 (log_softmax). Inputs on cpu or
// (in CUDA builds) cuda are computed there, cuda on the device's current stream.
// Meta inputs give meta outputs without computing anything.
// Autograd: both are differentiable; the backward saves only the output y:
// softmax dx = y * (g - sum(g * y)), log_softmax dx = g - exp(y) * sum(g).
#pragma once

#include "dtr/tensor/tensor.h"

#include <cstdint>

namespace dtr {

Tensor softmax(const Tensor& t, int64_t dim = -1);
Tensor log_softmax(const Tensor& t, int64_t dim = -1);

}  // namespace dtr
