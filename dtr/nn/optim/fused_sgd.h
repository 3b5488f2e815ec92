// FusedSGD: SGD (dtr/nn/optim/sgd.h) with the fused multi-tensor kernels required
// (SGDOptions::fused = true, like PyTorch's SGD(fused=True)): every parameter must
// be a contiguous CPU or CUDA tensor, else construction fails naming it. SGD
// already runs the same kernels by default wherever the parameters allow; this
// name is for code that wants the guarantee.
//
// Same options, state ("momentum_buffer" when momentum != 0, under
// MemoryTag::optimizer_state) and kind, "SGD", so state_dicts and checkpoints move
// freely between SGD and FusedSGD.
#pragma once

#include "dtr/nn/optim/sgd.h"

namespace dtr::nn::optim {

class FusedSGD : public SGD {
 public:
  FusedSGD(OptimizerParams params, SGDOptions options);
  FusedSGD(std::vector<ParamGroup> groups, SGDOptions options);
};

}  // namespace dtr::nn::optim
