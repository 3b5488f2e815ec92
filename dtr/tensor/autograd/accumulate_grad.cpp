#include "dtr/tensor/autograd/accumulate_grad.h"

#include "dtr/tensor/autograd/autograd_meta.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"

namespace dtr::autograd {

AccumulateGrad::AccumulateGrad(Tensor leaf) : leaf_(std::move(leaf)) {
  add_output({leaf_.sizes(), leaf_.dtype(), leaf_.device()});
}

std::shared_ptr<Node> AccumulateGrad::for_leaf(const Tensor& leaf) {
  AutogradMeta& meta = leaf.ensure_autograd_meta();
  if (auto existing = meta.accumulator.lock()) return existing;
  // The node holds the leaf; the leaf only a weak reference back (no cycle).
  auto node = std::make_shared<AccumulateGrad>(leaf);
  meta.accumulator = node;
  return node;
}

bool held_alone(const Tensor& grad) {
  return grad.defined() && grad.use_count() == 1 && grad.storage().use_count() == 1 && !grad.requires_grad() &&
         !grad.device().is_meta() && grad.is_contiguous() && grad.storage_offset() == 0 &&
         grad.storage().nbytes() == grad.nbytes();
}

namespace {

// Whether `grad` can become the leaf's .grad as it is, with no copy: held by this
// node alone, with the leaf's dtype and device.
bool can_take_over(const Tensor& grad, const Tensor& leaf) {
  return held_alone(grad) && grad.dtype() == leaf.dtype() && grad.device() == leaf.device();
}

}  // namespace

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor> grads) {
  Tensor grad = std::move(grads[0]);
  AutogradMeta& meta = leaf_.ensure_autograd_meta();
  for (auto& [handle, hook] : meta.leaf_hooks) {
    Tensor replaced = hook(grad);
    if (replaced.defined()) grad = std::move(replaced);
  }
  DTR_CHECK(grad.sizes() == leaf_.sizes(),
            "AccumulateGrad: gradient of shape {} for a leaf of shape {} (a hook returned the wrong "
            "shape?)",
            shape_str(grad.sizes()), shape_str(leaf_.sizes()));
  if (!meta.grad.defined() && can_take_over(grad, leaf_)) {
    if (grad.storage().tag() != MemoryTag::grad) grad.storage().set_tag(MemoryTag::grad);
    meta.grad = std::move(grad);
  } else if (!meta.grad.defined()) {
    // A fresh tensor: the incoming gradient is shared, or not laid out like a .grad.
    Tensor fresh = empty(leaf_.sizes(), {.dtype = leaf_.dtype(), .device = leaf_.device(),
                                         .tag = MemoryTag::grad});
    fresh.copy_(grad);
    meta.grad = fresh;
  } else {
    add_(meta.grad, grad);
  }
  return {};
}

}  // namespace dtr::autograd
