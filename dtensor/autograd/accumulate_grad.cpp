#include "dtensor/autograd/accumulate_grad.h"

#include "dtensor/autograd/autograd_meta.h"
#include "dtensor/factory.h"
#include "dtensor/ops/elementwise.h"

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
  if (!meta.grad.defined()) {
    // A fresh tensor: the incoming gradient may be shared with other nodes.
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
