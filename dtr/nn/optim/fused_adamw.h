// FusedAdamW: AdamW (dtr/nn/optim/adamw.h) with the fused multi-tensor kernels
// required (AdamWOptions::fused = true, like PyTorch's AdamW(fused=True)): every
// parameter must be a contiguous CPU or CUDA tensor, else construction fails
// naming it. AdamW already runs the same kernels by default wherever the
// parameters allow; this name is for code that wants the guarantee.
//
// Same options, state names ("exp_avg", "exp_avg_sq", under
// MemoryTag::optimizer_state) and kind, "AdamW", so state_dicts and checkpoints
// move freely between AdamW and FusedAdamW.
#pragma once

#include "dtr/nn/optim/adamw.h"

namespace dtr::nn::optim {

class FusedAdamW : public AdamW {
 public:
  FusedAdamW(OptimizerParams params, AdamWOptions options);
  FusedAdamW(std::vector<ParamGroup> groups, AdamWOptions options);
};

}  // namespace dtr::nn::optim
