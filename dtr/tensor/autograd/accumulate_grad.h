// AccumulateGrad: the node at the end of every path to a leaf that requires
// grad. It runs the leaf's hooks, then adds the gradient into leaf.grad(). On
// first use leaf.grad() takes over the incoming gradient when nothing else holds
// it and it is a dense, contiguous tensor of the leaf's dtype and device owning its
// whole storage (re-counted under MemoryTag::grad); otherwise it is a fresh copy
// under MemoryTag::grad. Later gradients are added in place.
#pragma once

#include "dtr/tensor/autograd/node.h"

namespace dtr::autograd {

class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor leaf);
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override;

  // The leaf's accumulator, created on first use and shared by all edges to it.
  static std::shared_ptr<Node> for_leaf(const Tensor& leaf);

 private:
  Tensor leaf_;
};

// Whether `grad` is held by its caller alone (no other handle to it or to its
// storage, so no view of it lives anywhere) and is a dense tensor outside any
// graph: contiguous, covering its whole storage, not on meta, not requiring grad.
// Such a gradient may be kept, or added to, in place: by AccumulateGrad above, and
// by the engine for Node::accumulate_into.
bool held_alone(const Tensor& grad);

}  // namespace dtr::autograd
