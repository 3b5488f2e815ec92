// nn::Parameter: a module's parameter as a stable handle, what torch.nn.Parameter
// is to a PyTorch module. Module::register_parameter returns one; every copy of it
// names the same slot of its module, so a module may keep it in a member and use it
// in forward (the libtorch habit), and always computes with what the slot holds
// now: fully_shard swaps that between the local shard (between steps) and the
// unsharded tensor (while the module computes), and to(), to_empty() and
// load_state_dict() put new tensors in it.
//
//   class Affine : public nn::Module {
//     nn::Parameter scale_ = register_parameter("scale", dtr::ones({4}));
//     Tensor forward(const Tensor& x) override { return dtr::mul(x, scale_); }
//   };
//
// A Tensor copied out of a Parameter (Tensor w = scale_;) is a snapshot of the slot
// at that moment: keep the Parameter instead.
#pragma once

#include "tensor/tensor.h"

#include <memory>
#include <utility>

namespace dtr::nn {

class Parameter {
 public:
  Parameter() = default;  // names no slot

  // What the slot holds now (an error for a handle that names no slot).
  const Tensor& data() const;
  operator const Tensor&() const { return data(); }
  const Tensor* operator->() const { return &data(); }
  bool defined() const { return slot_ != nullptr; }

 private:
  friend class Module;
  explicit Parameter(std::shared_ptr<Tensor> slot) : slot_(std::move(slot)) {}
  Tensor& slot() const { return *slot_; }

  std::shared_ptr<Tensor> slot_;
};

}  // namespace dtr::nn
