// Rotary position embedding (RoPE) of queries or keys, Llama style.
//
// x has shape [B, T, H, D] (batch, sequence, heads, head dim) with D even. The
// pairing convention is the *interleaved* one of Meta's Llama reference code:
// the pair (x[..., 2i], x[..., 2i + 1]) for i in [0, D / 2) is rotated by the angle
//   a(t, i) = (position_offset + t) * theta^(-2i / D)
// as the complex number x[2i] + j x[2i + 1] times e^(j a):
//   y[2i]     = x[2i] cos a - x[2i + 1] sin a
//   y[2i + 1] = x[2i] sin a + x[2i + 1] cos a
// (Not the "rotate_half" convention of Hugging Face, which pairs i with i + D/2.)
// Angles are computed in double; cos/sin and the rotation in float (double for
// f64), and bf16/f16 round once on store. x may be non-contiguous; the result
// is a new contiguous tensor of x's shape and dtype. cpu, cuda (dtr/kernels/cuda/rope.h:
// the same values, bit for bit wherever CUDA's double cos / sin / pow round like
// glibc's), or meta (shapes only).
//
// Autograd: differentiable in x; the backward rotates the gradient by -a.
#pragma once

#include "dtr/tensor/tensor.h"

#include <cstdint>

namespace dtr {

Tensor rope(const Tensor& x, double theta = 10000.0, int64_t position_offset = 0);

}  // namespace dtr
