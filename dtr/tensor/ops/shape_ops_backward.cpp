// The backward of cat (declared in dtr/tensor/ops/shape_ops_backward.h).
#include "dtr/tensor/ops/shape_ops_backward.h"

namespace dtr::ops {

std::vector<Tensor> CatBackward::apply(std::vector<Tensor> grads) {
  std::vector<Tensor> out(sizes_.size());
  if (!grads[0].defined()) return out;
  int64_t start = 0;
  for (size_t i = 0; i < sizes_.size(); ++i) {
    if (needs_input_grad(i)) out[i] = grads[0].narrow(dim_, start, sizes_[i]);
    start += sizes_[i];
  }
  return out;
}

}  // namespace dtr::ops
