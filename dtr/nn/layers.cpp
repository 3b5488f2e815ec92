#include "dtr/nn/layers.h"

#include "dtr/nn/init.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/dropout.h"
#include "dtr/tensor/ops/nn.h"

namespace dtr::nn {

namespace {
TensorOptions param_options(const LayerOptions& o) {
  return {.dtype = o.dtype, .device = o.device, .tag = MemoryTag::param};
}
}  // namespace

Embedding::Embedding(int64_t num_embeddings, int64_t dim, double init_std, const LayerOptions& options)
    : init_std_(init_std) {
  DTR_CHECK(num_embeddings > 0 && dim > 0, "Embedding: sizes must be positive, got {} x {}",
            num_embeddings, dim);
  weight_ = register_parameter("weight", empty({num_embeddings, dim}, param_options(options)));
  NoGradGuard no_grad;
  reset_own_parameters();
}

void Embedding::reset_own_parameters() { init::normal_(weight_, 0.0, init_std_); }

Tensor Embedding::forward(const Tensor& indices) { return embedding(weight_, indices); }

LayerNorm::LayerNorm(int64_t dim, double eps, bool affine, const LayerOptions& options)
    : dim_(dim), eps_(eps), affine_(affine) {
  if (affine_) {
    weight_ = register_parameter("weight", empty({dim}, param_options(options)));
    bias_ = register_parameter("bias", empty({dim}, param_options(options)));
    NoGradGuard no_grad;
    reset_own_parameters();
  }
}

void LayerNorm::reset_own_parameters() {
  if (!affine_) return;
  weight_->fill_(1);
  bias_->zero_();
}

Tensor LayerNorm::forward(const Tensor& x) {
  return affine_ ? layer_norm(x, dim_, weight_, bias_, eps_)
                 : layer_norm(x, dim_, Tensor(), Tensor(), eps_);
}

RMSNorm::RMSNorm(int64_t dim, double eps, const LayerOptions& options) : eps_(eps) {
  weight_ = register_parameter("weight", empty({dim}, param_options(options)));
  NoGradGuard no_grad;
  reset_own_parameters();
}

void RMSNorm::reset_own_parameters() { weight_->fill_(1); }

Tensor RMSNorm::forward(const Tensor& x) { return rms_norm(x, weight_, eps_); }

Dropout::Dropout(double p) : p_(p) {
  DTR_CHECK(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got {}", p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p_, is_training()); }

}  // namespace dtr::nn
