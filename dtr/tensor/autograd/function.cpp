#include "dtr/tensor/autograd/function.h"

#include "dtr/tensor/autograd/accumulate_grad.h"
#include "dtr/tensor/autograd/autograd_meta.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/ops/reduce.h"

#include <algorithm>

namespace dtr::autograd {

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!is_grad_enabled()) return false;
  for (const Tensor* t : inputs) {
    if (t->defined() && t->requires_grad()) return true;
  }
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  AutogradMeta* meta = t.autograd_meta();
  if (meta == nullptr || !meta->requires_grad) return {};
  if (meta->grad_fn) return {meta->grad_fn, meta->output_nr};
  return {AccumulateGrad::for_leaf(t), 0};
}

bool any_requires_grad(std::span<const Tensor> tensors) {
  return std::any_of(tensors.begin(), tensors.end(), [](const Tensor& t) { return t.defined() && t.requires_grad(); });
}

void set_history(const std::shared_ptr<Node>& node, std::initializer_list<const Tensor*> inputs,
                 std::initializer_list<const Tensor*> outputs) {
  set_history(node, std::span<const Tensor* const>(inputs.begin(), inputs.size()),
              std::span<const Tensor* const>(outputs.begin(), outputs.size()));
}

void set_history(const std::shared_ptr<Node>& node, std::span<const Tensor* const> inputs,
                 std::span<const Tensor* const> outputs) {
  for (const Tensor* in : inputs) node->next_edges().push_back(gradient_edge(*in));
  for (const Tensor* out : outputs) {
    DTR_INTERNAL_ASSERT(is_floating(out->dtype()), "{} output of dtype {} cannot require grad",
                        node->name(), out->dtype());
    AutogradMeta& meta = out->ensure_autograd_meta();
    meta.requires_grad = true;
    meta.grad_fn = node;
    meta.output_nr = node->add_output({out->sizes(), out->dtype(), out->device()});
  }
}

namespace {

class LambdaBackward final : public Node {
 public:
  LambdaBackward(std::string name, std::function<Tensor(const Tensor&)> fn)
      : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override { return {fn_(grads[0])}; }

 private:
  std::string name_;
  std::function<Tensor(const Tensor&)> fn_;
};

// Passes every gradient through unchanged, calling fn_ first.
class CallAfterBackward final : public Node {
 public:
  explicit CallAfterBackward(std::function<void()> fn) : fn_(std::move(fn)) {}
  std::string name() const override { return "CallAfterBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    fn_();
    return grads;
  }

 private:
  std::function<void()> fn_;
};

}  // namespace

Tensor call_after_backward(const Tensor& x, std::function<void()> fn) {
  DTR_CHECK(x.requires_grad(),
            "call_after_backward: the tensor (shape {}) does not require grad, so no backward will "
            "reach it; use queue_callback",
            shape_str(x.sizes()));
  return call_after_backward(std::vector<Tensor>{x}, std::move(fn))[0];
}

std::vector<Tensor> call_after_backward(const std::vector<Tensor>& xs, std::function<void()> fn) {
  std::vector<const Tensor*> inputs;
  std::vector<Tensor> out = xs;
  std::vector<const Tensor*> outputs;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].defined() || !xs[i].requires_grad()) continue;
    inputs.push_back(&xs[i]);
    out[i] = xs[i].detach();
    outputs.push_back(&out[i]);
  }
  DTR_CHECK(!inputs.empty(),
            "call_after_backward: none of the {} tensors requires grad, so no backward will reach them; use "
            "queue_callback",
            xs.size());
  set_history(std::make_shared<CallAfterBackward>(std::move(fn)), inputs, outputs);
  return out;
}

Tensor record_unary(const Tensor& input, Tensor output, std::string name,
                    std::function<Tensor(const Tensor& grad)> backward) {
  if (needs_grad({&input})) {
    auto node = std::make_shared<LambdaBackward>(std::move(name), std::move(backward));
    set_history(node, {&input}, {&output});
  }
  return output;
}

void check_inplace(std::string_view op, const Tensor& self) {
  DTR_CHECK(!(is_grad_enabled() && self.requires_grad()),
            "{}: in-place write to a tensor that requires grad (shape {}); autograd does not "
            "record in-place ops: use the out-of-place op, or write under NoGradGuard (e.g. for "
            "initialisation or an optimizer step)",
            op, shape_str(self.sizes()));
  self.bump_version();
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.sizes() == shape) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  DTR_INTERNAL_ASSERT(lead >= 0, "sum_to: {} has fewer dims than {}", shape_str(grad.sizes()),
                      shape_str(shape));
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < grad.dim(); ++d) {
    if (d < lead || (shape[d - lead] == 1 && grad.size(d) != 1)) dims.push_back(d);
  }
  Tensor summed = dims.empty() ? grad : sum(grad, dims, /*keepdim=*/true);
  return summed.reshape(shape);
}

}  // namespace dtr::autograd
