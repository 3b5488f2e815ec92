// nn::Parameter: a module's parameter as a stable handle, what torch.nn.Parameter
// is to a PyTorch module. Module::register_parameter returns one, and
// named_parameters() / parameters() give them; every copy of it names the same slot
// of its module, so a module may keep it in a member and use it in forward (the
// libtorch habit), and always computes with what the slot holds now.
//
// A slot holds the parameter's own tensor, data(): what optimizers step, state
// dicts save and to(), to_empty() and load_state_dict() replace; for a sharded
// parameter, this rank's local shard. While fully_shard has the unsharded tensor
// installed for a forward and backward, the module computes with that instead:
// in_use(), which the conversion to Tensor and -> give, is the installed tensor
// then and data() otherwise. So a module's forward sees the whole weight, while an
// optimizer built from model.parameters() steps the shard, as in PyTorch's FSDP2
// (whose registered parameters stay sharded).
//
//   class Affine : public nn::Module {
//     nn::Parameter scale_ = register_parameter("scale", dtr::ones({4}));
//     Tensor forward(const Tensor& x) override { return dtr::mul(x, scale_); }
//   };
//
// A Tensor copied out of a Parameter (Tensor w = scale_;) is a snapshot of the slot
// at that moment: keep the Parameter instead.
//
// A sharded parameter (fully_shard, or a tensor-parallel plan) records its DTensor
// layout in the slot: sharding() gives the global shape, mesh and placements, and
// as_dtensor() the local shard with it, which is how gradient clipping, state
// dicts, checkpoints and the memory estimator see the global parameter.
#pragma once

#include "dtr/dtensor/dtensor.h"
#include "dtr/dtensor/dtensor_spec.h"
#include "dtr/tensor/tensor.h"

#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace dtr::nn {

class Parameter {
 public:
  Parameter() = default;  // names no slot
  // A parameter outside any module, in a slot of its own (torch.nn.Parameter(t)):
  // what an optimizer or clip_grad_norm_ given plain tensors works on.
  explicit Parameter(Tensor value);

  // The parameter's own tensor (an error for a handle that names no slot).
  const Tensor& data() const;
  // What the module computes with now: the tensor installed for compute, else data().
  const Tensor& in_use() const;
  operator const Tensor&() const { return in_use(); }
  const Tensor* operator->() const { return &in_use(); }
  bool defined() const { return slot_ != nullptr; }
  // True when both handles name the same slot (tied parameters share one).
  bool same_slot(const Parameter& other) const { return slot_ == other.slot_; }

  // The parameter's DTensor layout when it is sharded, else null.
  const DTensorSpec* sharding() const;
  bool is_sharded() const { return sharding() != nullptr; }
  // The global (unsharded) shape and element count: sharding()'s, else data()'s.
  Shape global_shape() const;
  int64_t global_numel() const { return numel_of(global_shape()); }
  // Where data() sits in the global parameter: this rank's box when sharded, whole
  // otherwise. Random fills (dtr/nn/init.h) take it, so a shard gets the values of the
  // unsharded fill.
  LogicalSlice logical_slice() const;
  // data() with its layout (the tensor itself: .grad() and .detach() of the DTensor
  // give the gradient and the values). Errors when the parameter is not sharded.
  DTensor as_dtensor() const;

 private:
  friend class Module;
  struct Slot {
    Tensor value;
    std::optional<Tensor> installed;  // what the module computes with instead of value
    std::shared_ptr<const DTensorSpec> sharding;
  };
  explicit Parameter(std::shared_ptr<Slot> slot) : slot_(std::move(slot)) {}
  Slot& slot() const { return *slot_; }

  std::shared_ptr<Slot> slot_;
};

// Standalone parameters for plain tensors (Parameter(t) each).
std::vector<Parameter> as_parameters(const std::vector<Tensor>& tensors);

}  // namespace dtr::nn
