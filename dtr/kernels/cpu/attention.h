// Fused scaled dot-product attention on the CPU, forward and backward, with
// grouped-query attention and an optional causal mask. Buffers are contiguous,
// in float or double (the op layer in dtr/tensor/ops/attention.h converts bf16/f16
// to float first):
//   q, out, dq: [B, Hq, T, D]    k, v, dk, dv: [B, Hkv, S, D]    lse: [B, Hq, T]
// Query head h reads kv head h / (Hq / Hkv). Query row t sees keys s < n(t), with
//   n(t) = S                          (not causal)
//   n(t) = clamp(t + (S - T) + 1, 0, S)  (causal: keys <= t + S - T)
// Forward, per row: p_s = exp(scale q_t.k_s - lse_t), lse_t = log sum_s exp(scale q_t.k_s),
// out_t = sum_s p_s v_s. Only the [B, Hq, T] log-sum-exps are kept for the backward
// (no T x S matrix is stored). A row that sees no key gets out = 0, lse = -inf.
// Backward, with D_t = dout_t.out_t and ds_s = p_s (dout_t.v_s - D_t):
//   dq_t = scale sum_s ds_s k_s,   dk_s = scale sum_t ds_s q_t,   dv_s = sum_t p_s dout_t,
// dk and dv summed over the query heads of the kv head's group. Work is split by
// (batch, kv head), each thread summing in a fixed order, so results do not
// depend on the thread count.
#pragma once

#include "dtr/kernels/cpu/cpu_level.h"

#include <cstdint>

namespace dtr::kernels::cpu {

struct AttentionDims {
  int64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0;
  bool causal = false;
  double scale = 1.0;
};

// A is float or double.
DTR_CPU_AT_EVERY_LEVEL(template <class A>
                       void attention_forward(const A* q, const A* k, const A* v,
                                              const AttentionDims& dims, A* out, A* lse);)
template <class A>
void attention_forward(const A* q, const A* k, const A* v, const AttentionDims& dims, A* out,
                       A* lse) {
  return DTR_CPU_DISPATCH(attention_forward<A>)(q, k, v, dims, out, lse);
}

// dq, dk, dv are overwritten; each may be null to skip it.
DTR_CPU_AT_EVERY_LEVEL(template <class A>
                       void attention_backward(const A* q, const A* k, const A* v, const A* out,
                                               const A* lse, const A* dout,
                                               const AttentionDims& dims, A* dq, A* dk, A* dv);)
template <class A>
void attention_backward(const A* q, const A* k, const A* v, const A* out, const A* lse,
                        const A* dout, const AttentionDims& dims, A* dq, A* dk, A* dv) {
  return DTR_CPU_DISPATCH(attention_backward<A>)(q, k, v, out, lse, dout, dims, dq, dk, dv);
}

}  // namespace dtr::kernels::cpu
