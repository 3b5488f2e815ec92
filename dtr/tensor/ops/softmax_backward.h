// Internal to tensor/ops: autograd for softmax and log_softmax (softmax.h). The
// forward computes without recording and then calls this, which records a
// backward node for `out` when grad mode is on and `t` requires grad. The node
// saves only the output y (as a detached view):
//   softmax:     dx = y * (g - sum(g * y, dim))
//   log_softmax: dx = g - exp(y) * sum(g, dim)
#pragma once

#include "dtr/tensor/tensor.h"

#include <cstdint>

namespace dtr::ops {

void record_softmax_backward(const Tensor& t, int64_t dim, bool log, const Tensor& out);

}  // namespace dtr::ops
