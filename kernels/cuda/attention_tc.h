// Internal to the CUDA attention (attention.h): the tensor-core kernels of
// attention_tc.cu, for bf16/f16 with head_dim 64 or 128. Host declarations only.
//
// They compute what the CUDA-core kernels compute (same schedule, same masks), with
// the products on mma.sync.m16n8k16 (bf16/f16 operands, f32 accumulate): scores in
// f32; the probabilities P (forward, dv) and dS (dk, dq) are rounded to T before they
// enter the next product, as in FlashAttention-2; softmax statistics, lse, delta and
// every accumulator stay f32.
#pragma once

#include "kernels/cuda/attention.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

namespace dtr::kernels::cuda::attention_detail {

// Whether the tensor-core kernels take this head_dim (64 or 128); the caller also
// needs 16-byte aligned pointers (tc_aligned).
bool tc_supported(int64_t head_dim);
bool tc_aligned(std::initializer_list<const void*> pointers);  // null counts as aligned

// T is bf16 or f16. Same contracts as attention_forward / the dq, dk, dv part of
// attention_backward (delta already holds dout_t.out_t).
template <class T>
void tc_forward(const T* q, const T* k, const T* v, const AttentionDims& dims, T* out, float* lse,
                cudaStream_t stream);
template <class T>
void tc_backward(const T* q, const T* k, const T* v, const float* lse, const T* dout, const float* delta,
                 const AttentionDims& dims, T* dq, T* dk, T* dv, cudaStream_t stream);

}  // namespace dtr::kernels::cuda::attention_detail
