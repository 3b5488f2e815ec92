#include "dtr/nn/linear.h"

#include "dtr/nn/init.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/matmul.h"

#include <cmath>

namespace dtr::nn {

Linear::Linear(int64_t in_features, int64_t out_features, const LinearOptions& options)
    : in_(in_features),
      out_(out_features),
      init_std_(options.init_std),
      activation_(options.activation) {
  DTR_CHECK(in_features > 0 && out_features > 0,
            "Linear: in_features and out_features must be positive, got {} and {}", in_features,
            out_features);
  TensorOptions t{.dtype = options.dtype, .device = options.device, .tag = MemoryTag::param};
  weight_ = register_parameter("weight", empty({out_, in_}, t));
  if (options.bias) bias_ = register_parameter("bias", empty({out_}, t));
  NoGradGuard no_grad;
  reset_own_parameters();
}

void Linear::reset_own_parameters() {
  if (init_std_ > 0) {
    init::normal_(weight_, 0.0, init_std_);
    if (bias_.defined()) bias_->zero_();
    return;
  }
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_));
  init::uniform_(weight_, -bound, bound);
  if (bias_.defined()) init::uniform_(bias_, -bound, bound);
}

Tensor Linear::forward(const Tensor& input) {
  // The weight slot's in dim: in_features, or this rank's share of it when the
  // slot holds a tensor-parallel shard (nn/tensor_parallel/).
  const Tensor& weight = weight_;
  const int64_t in = weight.dim() == 2 ? weight.size(1) : in_;
  DTR_CHECK(input.dim() >= 1 && input.size(-1) == in,
            "Linear: expected input with last dim {} (in_features{}), got shape {}", in,
            in == in_ ? "" : ", this rank's share", shape_str(input.sizes()));
  return linear(input, weight, bias_.defined() ? bias_.in_use() : Tensor(), activation_);
}

}  // namespace dtr::nn
