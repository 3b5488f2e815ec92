// Internal to tensor/ops: autograd for the reductions of reduce.h. The forward
// ops compute without recording and then call one of these, which records a
// backward node for `out` when grad mode is on and `t` requires grad (otherwise
// they do nothing). argmax and integer results are never recorded.
#pragma once

#include "dtr/tensor/tensor.h"

#include <vector>

namespace dtr::ops {

// out = sum(t, dims, keepdim) or, with `mean`, mean(t, dims, keepdim) (either
// keepdim); reduced[d] says whether dim d of t was reduced (dims after wrapping).
void record_sum_backward(const Tensor& t, const std::vector<bool>& reduced, bool mean,
                         const Tensor& out);

// out = max(t, dim, keepdim) (is_max) or min(t, dim, keepdim). The gradient goes
// to the position along dim that argmax picks (the first max, or first min), found
// here from t when recording; only those indices are saved.
void record_extremum_dim_backward(const Tensor& t, int64_t dim, bool keepdim, bool is_max,
                                  const Tensor& out);

// out = max(t) (is_max) or min(t), 0-d: the gradient is split evenly among every
// element equal to out (every NaN, when out is NaN). Saves t and out.
void record_extremum_all_backward(const Tensor& t, bool is_max, const Tensor& out);

}  // namespace dtr::ops
