// Scaled dot-product attention (like torch.nn.functional.scaled_dot_product_attention)
// with grouped-query attention and an optional causal mask, on a fused kernel
// (dtr/kernels/cpu/attention.h, dtr/kernels/cuda/attention.h) that never stores the T x S
// attention matrix.
//
//   q [B, Hq, T, D], k [B, Hkv, S, D], v [B, Hkv, S, D]  ->  out [B, Hq, T, D]
//   out[b, h, t] = sum_s softmax_s(scale * q[b, h, t] . k[b, g, s]) v[b, g, s]
// where g = h / (Hq / Hkv): Hq must be a multiple of Hkv, and each group of Hq / Hkv
// consecutive query heads shares one kv head (Hq == Hkv is ordinary multi-head
// attention). With causal, query t sees keys s <= t + (S - T) (the last query row
// is aligned with the last key, as for decoding with a kv cache); a query row that
// sees no key at all (only when T > S) gives 0, with a 0 gradient.
// scale defaults to 1 / sqrt(D).
//
// q, k and v must share a floating dtype (f32, f64, bf16, f16) and a device (cpu,
// cuda, or meta: shapes only); they may be non-contiguous. bf16/f16 compute in float
// and round once; the result is a new tensor of q's dtype. On cpu, bf16/f16 inputs
// are converted to float (and made contiguous) for the kernel, and the result is
// contiguous. On cuda the kernels read q, k, v as stored, in place whenever the head
// dim is unit-stride (head_dim must be <= 256 there, else a dtr::Error), and the
// result and the gradients follow their input's order of dims: for q a [B, T, H, D]
// tensor seen as [B, H, T, D] (transpose(1, 2)), out is stored [B, T, H, D] too, so
// out.transpose(1, 2).reshape({B, T, H * D}) is a view, not a copy.
//
// Autograd: differentiable in q, k and v. The op saves q, k, v and out plus one
// log-sum-exp per query row (f32, f64 for f64), and the backward recomputes the
// probabilities from them. On cpu the saved q, k, v and out are in float (double for
// f64); on cuda they stay in the inputs' dtype (as FlashAttention does), so a bf16/f16
// backward there sees out rounded to that dtype.
#pragma once

#include "dtr/tensor/tensor.h"

#include <optional>

namespace dtr {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool causal = false,
                                    std::optional<double> scale = std::nullopt);

}  // namespace dtr
