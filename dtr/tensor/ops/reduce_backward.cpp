// Backward of sum, mean, max and min:
//   sum:  grad_t = g broadcast back over the reduced dims (a stride-0 view);
//   mean: the same divided by the number of reduced elements;
//   max/min over a dim: g goes to the argmax (argmin) position along the dim,
//         zeros elsewhere (a one-hot mask from comparing an arange with the index);
//   max/min of the whole tensor: g split evenly among the elements equal to the
//         result, like PyTorch (the NaNs, when the result is NaN).
// The formulas are tensor ops, so they run on whichever device the tensors are on.
#include "dtr/tensor/ops/reduce_backward.h"

#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/reduce.h"

#include <memory>
#include <string>
#include <vector>

namespace dtr::ops {

namespace {

using autograd::SavedTensor;

// kept_shape: the input's shape with each reduced dim as size 1 (the result's
// shape with keepdim; without it the result only lacks those size-1 dims).
class SumBackward final : public autograd::Node {
 public:
  SumBackward(bool mean, Shape input_shape, Shape kept_shape, int64_t count)
      : mean_(mean), input_shape_(std::move(input_shape)), kept_shape_(std::move(kept_shape)), count_(count) {}

  std::string name() const override { return mean_ ? "MeanBackward" : "SumBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    Tensor g = grads[0].reshape(kept_shape_);
    if (mean_) g = div(g, Scalar(count_));
    return {g.expand(input_shape_)};
  }

 private:
  bool mean_;
  Shape input_shape_, kept_shape_;
  int64_t count_;
};

// max/min over `dim`: saves the [..., 1, ...] indices of the picked elements.
class ExtremumDimBackward final : public autograd::Node {
 public:
  ExtremumDimBackward(bool is_max, Shape input_shape, int64_t dim, bool keepdim, const Tensor& index)
      : is_max_(is_max), input_shape_(std::move(input_shape)), dim_(dim), keepdim_(keepdim), index_(index) {}

  std::string name() const override { return is_max_ ? "MaxDimBackward" : "MinDimBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    const Tensor index = index_.unpack(*this);
    if (input_shape_.empty()) return {grads[0]};  // a 0-d input reduces nothing
    const Tensor g = keepdim_ ? grads[0] : grads[0].unsqueeze(dim_);
    // positions[..., j, ...] = j along dim, size 1 elsewhere; == index is the one-hot mask.
    Shape positions_shape(input_shape_.size(), 1);
    positions_shape[dim_] = input_shape_[dim_];
    const Tensor positions = arange(input_shape_[dim_], {.dtype = DType::i64, .device = g.device()})
                                 .view(positions_shape);
    const Tensor zero = scalar_tensor(0, g.dtype(), g.device());
    return {where(eq(positions, index), g, zero)};
  }

  void release_saved() override { index_.release(); }

 private:
  bool is_max_;
  Shape input_shape_;
  int64_t dim_;
  bool keepdim_;
  SavedTensor index_;
};

// max/min of the whole tensor: saves the input and the (0-d) result.
class ExtremumAllBackward final : public autograd::Node {
 public:
  ExtremumAllBackward(bool is_max, const Tensor& input, const Tensor& result)
      : is_max_(is_max), input_(input), result_(result) {}

  std::string name() const override { return is_max_ ? "MaxBackward" : "MinBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    const Tensor t = input_.unpack(*this);
    const Tensor v = result_.unpack(*this);
    // Elements equal to the result, or every NaN when the result is NaN (u8 masks:
    // maximum is "or", mul is "and").
    const Tensor mask = maximum(eq(t, v), mul(ne(t, t), ne(v, v)));
    const Tensor count = cast(sum(mask), grads[0].dtype());
    const Tensor zero = scalar_tensor(0, grads[0].dtype(), grads[0].device());
    return {where(mask, div(grads[0], count), zero)};
  }

  void release_saved() override {
    input_.release();
    result_.release();
  }

 private:
  bool is_max_;
  SavedTensor input_, result_;
};

}  // namespace

void record_sum_backward(const Tensor& t, const std::vector<bool>& reduced, bool mean,
                         const Tensor& out) {
  if (!autograd::needs_grad({&t})) return;
  Shape kept_shape = t.sizes();
  int64_t count = 1;
  for (size_t d = 0; d < reduced.size(); ++d) {
    if (!reduced[d]) continue;
    count *= kept_shape[d];
    kept_shape[d] = 1;
  }
  auto node = std::make_shared<SumBackward>(mean, t.sizes(), std::move(kept_shape), count);
  autograd::set_history(node, {&t}, {&out});
}

void record_extremum_dim_backward(const Tensor& t, int64_t dim, bool keepdim, bool is_max,
                                  const Tensor& out) {
  if (!autograd::needs_grad({&t})) return;
  Tensor index;
  {
    NoGradGuard no_grad;
    // The first min is the first max of -t (NaN stays NaN, which both pick first).
    index = argmax(is_max ? t : neg(t), dim, /*keepdim=*/true);
  }
  const int64_t d = t.dim() == 0 ? 0 : t.wrap_dim(dim);
  auto node = std::make_shared<ExtremumDimBackward>(is_max, t.sizes(), d, keepdim, index);
  autograd::set_history(node, {&t}, {&out});
}

void record_extremum_all_backward(const Tensor& t, bool is_max, const Tensor& out) {
  if (!autograd::needs_grad({&t})) return;
  auto node = std::make_shared<ExtremumAllBackward>(is_max, t.detach(), out.detach());
  autograd::set_history(node, {&t}, {&out});
}

}  // namespace dtr::ops
