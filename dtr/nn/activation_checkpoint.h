// Activation checkpointing: trade compute for memory by not keeping a module's
// activations after forward and recomputing its forward during backward (like
// PyTorch's checkpoint_wrapper / apply_activation_checkpointing).
//
//   nn::apply_activation_checkpointing(*model, [](const nn::Module& m) {
//     return dynamic_cast<const nn::TransformerBlock*>(&m) != nullptr;
//   });
//   for (auto& block : model->layers()) fsdp::fully_shard(*block);  // AC first, then FSDP
//
// CheckpointWrapper(module) forward, when grad mode is on and the input or a
// parameter of the module requires grad: runs the module under NoGradGuard (no
// graph is recorded, so every intermediate tensor is freed as soon as it is
// dead), saves only its input and the state of the default generator, and
// returns the output attached to the graph through one node. That node's
// backward (re-entrant, as PyTorch's reentrant checkpoint):
//   1. sets the default generator to the saved state, re-runs the module's
//      forward (through operator(), so the module's own hooks run again) with
//      grad mode on, on a detached copy of the saved input, then puts the
//      generator back where it was: dropout masks are the same as in the first
//      forward (dtr/tensor/ops/dropout.h) and the outer random stream is undisturbed;
//   2. calls autograd::backward on the recomputed output with the incoming
//      gradient (a nested backward, see dtr/tensor/autograd/engine.h): parameter
//      gradients accumulate into the parameters the module holds *at that time*,
//      and the gradient reaching the input copy is captured and returned.
// The node runs whenever its output gets a gradient, also when the input does
// not require grad (its only job then is the parameters' gradients).
// With grad mode off (evaluation) the wrapper just calls the module.
//
// Only the default generator is replayed: a module drawing from a generator of
// its own must save and restore it itself. The saved input must not be modified
// in place before backward (the usual saved-tensor check reports it).
//
// Names: the wrapped module is the wrapper's *wrapped child* (registered with
// the empty name, see dtr/nn/module.h), so parameter, buffer and module names are
// those of the unwrapped model ("layers.0.attn.wq.weight"; PyTorch would add
// "_checkpoint_wrapped_module."): a checkpointed model loads the plain model's
// state dict and vice versa, and FSDP's parameter names do not change.
//
// FSDP: apply checkpointing first, then fully_shard the wrapper (or a module
// containing it). The wrapper's FSDP pre-backward hook (a gradient hook on the
// wrapper's output) all-gathers the parameters before this node runs, so the
// recomputation uses them without another all-gather, and FSDP's post-backward
// (on the wrapper's input) runs after the nested backward has produced the
// gradients. If instead fully_shard is applied to the module inside the
// wrapper, its forward hooks run again during recomputation; FSDP must then
// only make sure the parameters are unsharded there.
#pragma once

#include "dtr/nn/module.h"

#include <functional>

namespace dtr::nn {

class CheckpointWrapper : public Module {
 public:
  explicit CheckpointWrapper(ModulePtr module);
  // "CheckpointWrapper(<wrapped type>)".
  std::string type_name() const override;
  Tensors forward_multi(const Tensors& inputs) override;
  Module& wrapped() const { return *module_; }
  const ModulePtr& wrapped_ptr() const { return module_; }

 private:
  ModulePtr module_;
};

// True on this thread while a CheckpointWrapper's backward re-runs its module's
// forward: forward hooks tell the recomputation from the first forward with it
// (FSDP on a module inside the wrapper must then only make sure the parameters are
// unsharded: no forward-order recording, no forward prefetch, no reshard after it).
bool in_checkpoint_recomputation();

// A CheckpointWrapper around `module`.
ModulePtr checkpoint_wrapper(ModulePtr module);

// Replaces every descendant of `model` for which predicate(descendant) is true by
// checkpoint_wrapper(descendant), through its parent's replace_child (so the
// parent must allow it: Sequential and ModuleList do, e.g. Transformer::layers()).
// A matching module's own descendants are not visited; modules already wrapped
// are left alone (calling it twice wraps nothing more). `model` itself is never
// wrapped. Returns how many modules were wrapped.
int apply_activation_checkpointing(Module& model, const std::function<bool(const Module&)>& predicate);

}  // namespace dtr::nn
