// AutogradMeta: the autograd state of one tensor, created the first time the
// tensor is involved in autograd (requires_grad_, an op output that needs grad,
// a hook). Plain tensors carry none.
#pragma once

#include "dtr/tensor/autograd/node.h"

#include <memory>
#include <utility>
#include <vector>

namespace dtr::autograd {

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;                       // accumulated gradient (leaves, and non-leaves that retain it)
  std::shared_ptr<Node> grad_fn;     // the op that produced this tensor; null for leaves
  uint32_t output_nr = 0;            // which output of grad_fn this tensor is
  std::weak_ptr<Node> accumulator;   // leaves: the AccumulateGrad node edges point at
  std::vector<std::pair<int, GradHook>> leaf_hooks;  // leaves: hooks run before accumulation
  int next_hook_handle = 0;
  bool retains_grad = false;
};

}  // namespace dtr::autograd
