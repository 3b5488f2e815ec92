// Dropout (like torch.nn.functional.dropout) with a reproducible, Philox-driven
// mask: every call draws one f32 uniform u_i per element of x from `gen` (the
// default generator when null) as one fill of a logical tensor of x's shape, i.e.
// it takes gen->next_fill(x.numel()) exactly like uniform_() does (see
// dtr/tensor/random.h). Element i is kept when u_i >= p and then scaled by
// 1 / (1 - p); otherwise it is 0. The mask is therefore a pure function of the
// generator's state before the call and x's shape (the same for every floating
// dtype): saving a GeneratorState and restoring it replays the same mask, which
// is how activation checkpointing recomputes a dropout exactly.
//
// p must be in [0, 1]. p == 0 or training == false returns x itself (no draw);
// p == 1 returns zeros (no draw). x must be floating (f32, f64, bf16, f16) on cpu,
// cuda or meta (meta draws, i.e. advances the generator, but computes nothing).
// On cuda one fused kernel (dtr/kernels/cuda/dropout.h) draws the same u_i from the
// same generator state, so the mask, the scale and the output equal the CPU's
// bit for bit.
//
// Autograd: differentiable in x; the backward multiplies the gradient by the same
// scale tensor (0 or 1 / (1 - p), in x's dtype), which is what the op saves.
#pragma once

#include "dtr/tensor/random.h"
#include "dtr/tensor/tensor.h"

namespace dtr {

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);

}  // namespace dtr
