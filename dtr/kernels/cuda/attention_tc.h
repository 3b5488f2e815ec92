// Internal to the CUDA attention (attention.h): the tensor-core kernels of
// attention_tc.cu, for bf16/f16 with head_dim 64 or 128. Host declarations only.
//
// They compute what the CUDA-core kernels compute (same schedule, same masks), with
// the products on mma.sync.m16n8k16 (bf16/f16 operands, f32 accumulate): scores in
// f32; the probabilities P (forward, dv) and dS (dk, dq) are rounded to T before they
// enter the next product, as in FlashAttention-2; softmax statistics, lse, delta and
// every accumulator stay f32.
#pragma once

#include "dtr/kernels/cuda/attention.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

namespace dtr::kernels::cuda::attention_detail {

// Whether the tensor-core kernels take this head_dim (64 or 128); the caller also
// needs every operand to pass tc_layout_ok.
bool tc_supported(int64_t head_dim);

// One operand of a kernel: its pointer and strides.
struct TcOperand {
  const void* ptr;
  AttentionStrides strides;
};
// Whether the kernels can move every row of these operands with 16-byte copies and
// stores: each pointer 16-byte aligned and each batch, head and row stride a multiple
// of 8 elements. A null operand (a gradient not asked for) qualifies.
bool tc_layout_ok(std::initializer_list<TcOperand> operands);

// T is bf16 or f16. Same contracts as attention_forward / the dq, dk, dv part of
// attention_backward (delta already holds dout_t.out_t).
template <class T>
void tc_forward(const T* q, const T* k, const T* v, const AttentionDims& dims,
                const AttentionForwardStrides& strides, T* out, float* lse, cudaStream_t stream);
template <class T>
void tc_backward(const T* q, const T* k, const T* v, const float* lse, const T* dout, const float* delta,
                 const AttentionDims& dims, const AttentionBackwardStrides& strides, T* dq, T* dk, T* dv,
                 cudaStream_t stream);

}  // namespace dtr::kernels::cuda::attention_detail
