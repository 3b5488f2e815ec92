// Fused scaled dot-product attention on a CUDA device, forward and backward: the
// CUDA twin of dtr/kernels/cpu/attention.h, with the same semantics, over strided device
// tensors of logical shapes
//   q, out, dq, dout: [B, Hq, T, D]    k, v, dk, dv: [B, Hkv, S, D]    lse, delta: [B, Hq, T]
// Each of q, k, v, out, dout, dq, dk, dv has its own AttentionStrides (element strides
// of its batch, head and row dims; the head_dim index is always unit-stride), so the
// kernels read and write views in place: an attention layer's [B, T, H, D] projection
// outputs seen as [B, H, T, D], or q, k, v sliced from one fused [B, T, 3, H, D] buffer.
// Outputs must not overlap each other or the inputs. lse and delta are contiguous.
// The overloads without strides take every tensor contiguous ([B, H, L, D]). Strides
// change addresses only, never an order of summation: on one implementation (below)
// every layout gives bitwise the same results.
//
// Query head h reads kv head h / (Hq / Hkv) (Hq must be a multiple of Hkv). Query
// row t sees keys s < n(t), with
//   n(t) = S                              (not causal)
//   n(t) = clamp(t + (S - T) + 1, 0, S)   (causal: keys <= t + S - T)
// Forward, per row: lse_t = log sum_s exp(scale q_t.k_s), out_t = sum_s
// exp(scale q_t.k_s - lse_t) v_s; a row that sees no key gets out = 0, lse = -inf.
// Backward, with D_t = dout_t.out_t and ds_s = p_s (dout_t.v_s - D_t):
//   dq_t = scale sum_s ds_s k_s,   dk_s = scale sum_t ds_s q_t,   dv_s = sum_t p_s dout_t,
// dk and dv summed over the query heads of the kv head's group.
//
// Element types: T is float, double, bf16 or f16, taken as stored (no conversion
// pass); everything is computed in acc_t<T> (float; double for double) and
// rounded once to T on store. lse and the backward's delta workspace are acc_t<T>.
// The backward recomputes the probabilities from q, k and lse (FlashAttention-2),
// so no T x S matrix is ever stored. head_dim must be <= 256.
//
// Kernels (FlashAttention-2 schedule, no atomics, fixed summation orders, so results
// are bitwise reproducible run to run):
//  - forward: one block per (batch, query head, block of query rows); key/value
//    blocks are staged in shared memory, each row keeps a running max and sum
//    (online softmax) and rescales its output accumulator; key blocks that causality
//    hides from every row of the block are skipped.
//  - backward: (1) delta_t = dout_t.out_t, one warp per row; (2) dk, dv: one block per
//    (batch, kv head, block of keys) looping over the query blocks of every query
//    head of its group, accumulating in registers; (3) dq: one block per (batch,
//    query head, block of query rows) looping over key blocks.
// Two implementations of those kernels: CUDA-core (f32 / f64 FMA) tiles for every
// dtype and head_dim, and tensor-core (mma.sync m16n8k16, f32 accumulate; P and dS
// rounded to T before their products, as in FlashAttention-2) tiles that take bf16/f16
// with head_dim 64 or 128 when every pointer is 16-byte aligned and every batch, head
// and row stride a multiple of 8 elements (16 bytes), unless switched off; any other
// layout runs on the CUDA-core kernels, which take any strides.
// Launchers enqueue on `stream` and never synchronize.
#pragma once

#include "dtr/kernels/cpu/attention.h"  // AttentionDims (plain C++)
#include "dtr/kernels/scalar_types.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace dtr::kernels::cuda {

using AttentionDims = cpu::AttentionDims;

// The largest head_dim the kernels take.
inline constexpr int64_t kAttentionMaxHeadDim = 256;

// Which implementation ran the most recent attention_forward / attention_backward
// call of this thread (none before the first or when it had nothing to compute).
// For tests and benchmarks.
enum class AttentionPath { none, simt, tensor_core };
AttentionPath attention_last_path();

// Allows (the default) or forbids the tensor-core kernels for the whole process;
// tests switch them off to compare both implementations on one GPU.
void attention_enable_tensor_cores(bool enable);

// Element strides of one [B, H, L, D] operand: between batches, heads and rows (the
// positions along L). The head_dim index is unit-stride.
struct AttentionStrides {
  int64_t batch = 0, head = 0, row = 0;
};

// The strides of a contiguous [B, heads, len, head_dim] tensor.
constexpr AttentionStrides contiguous_attention_strides(int64_t heads, int64_t len, int64_t head_dim) {
  return {heads * len * head_dim, len * head_dim, head_dim};
}

struct AttentionForwardStrides {
  AttentionStrides q, k, v, out;
};
struct AttentionBackwardStrides {
  AttentionStrides q, k, v, out, dout, dq, dk, dv;
};

// Every operand contiguous.
constexpr AttentionForwardStrides contiguous_forward_strides(const AttentionDims& d) {
  const AttentionStrides q = contiguous_attention_strides(d.q_heads, d.q_len, d.head_dim);
  const AttentionStrides kv = contiguous_attention_strides(d.kv_heads, d.kv_len, d.head_dim);
  return {q, kv, kv, q};
}
constexpr AttentionBackwardStrides contiguous_backward_strides(const AttentionDims& d) {
  const AttentionStrides q = contiguous_attention_strides(d.q_heads, d.q_len, d.head_dim);
  const AttentionStrides kv = contiguous_attention_strides(d.kv_heads, d.kv_len, d.head_dim);
  return {q, kv, kv, q, q, q, kv, kv};
}

// out and lse are overwritten.
template <class T>
void attention_forward(const T* q, const T* k, const T* v, const AttentionDims& dims,
                       const AttentionForwardStrides& strides, T* out, acc_t<T>* lse, cudaStream_t stream);

// dq, dk, dv are overwritten; each may be null to skip it (its strides are then
// ignored). `delta` is a workspace of B * Hq * T elements (its contents on return are
// dout_t.out_t).
template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* out, const acc_t<T>* lse,
                        const T* dout, const AttentionDims& dims, const AttentionBackwardStrides& strides,
                        T* dq, T* dk, T* dv, acc_t<T>* delta, cudaStream_t stream);

// The same over contiguous tensors.
template <class T>
void attention_forward(const T* q, const T* k, const T* v, const AttentionDims& dims, T* out,
                       acc_t<T>* lse, cudaStream_t stream) {
  attention_forward<T>(q, k, v, dims, contiguous_forward_strides(dims), out, lse, stream);
}
template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* out, const acc_t<T>* lse,
                        const T* dout, const AttentionDims& dims, T* dq, T* dk, T* dv,
                        acc_t<T>* delta, cudaStream_t stream) {
  attention_backward<T>(q, k, v, out, lse, dout, dims, contiguous_backward_strides(dims), dq, dk, dv, delta,
                        stream);
}

}  // namespace dtr::kernels::cuda
