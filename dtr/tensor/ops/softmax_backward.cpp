// Backward of softmax and log_softmax along one dim, from the saved output y
// (sums with keepdim, so they broadcast back along the dim). Tensor ops only, so
// it runs on whichever device the tensors are on.
#include "dtr/tensor/ops/softmax_backward.h"

#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/reduce.h"

#include <memory>
#include <string>
#include <vector>

namespace dtr::ops {

namespace {

class SoftmaxBackward final : public autograd::Node {
 public:
  SoftmaxBackward(int64_t dim, bool log, const Tensor& y) : dim_(dim), log_(log), y_(y) {}

  std::string name() const override { return log_ ? "LogSoftmaxBackward" : "SoftmaxBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    const Tensor y = y_.unpack(*this);
    const Tensor& g = grads[0];
    if (log_) return {sub(g, mul(exp(y), sum(g, {dim_}, /*keepdim=*/true)))};
    return {mul(y, sub(g, sum(mul(g, y), {dim_}, /*keepdim=*/true)))};
  }

  void release_saved() override { y_.release(); }

 private:
  int64_t dim_;
  bool log_;
  autograd::SavedTensor y_;
};

}  // namespace

void record_softmax_backward(const Tensor& t, int64_t dim, bool log, const Tensor& out) {
  if (!autograd::needs_grad({&t})) return;
  auto node = std::make_shared<SoftmaxBackward>(dim, log, out.detach());
  autograd::set_history(node, {&t}, {&out});
}

}  // namespace dtr::ops
