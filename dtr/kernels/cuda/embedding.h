// Embedding lookup on a CUDA device (the CUDA twins of dtr/kernels/cpu/embedding.h,
// with the same semantics): gather rows of a contiguous [rows, cols] device table
// by int64 index, and the matching deterministic backward. The op layer
// (dtr/tensor/ops/nn.h) checks every index is in [0, rows) first (with
// dtr/kernels/cuda/index_check.h); the kernels trust it.
//
// Forward: a plain row gather. Each row is copied in the widest unit (16, 8, 4,
// 2 or 1 bytes) that divides the row's byte size and both buffers' alignment;
// a block covers several tokens (threadIdx.y) and the units of their rows
// (threadIdx.x). Any element type.
//
// Backward, without float atomics, summing each table row's gradient in token
// order in acc_t<T> and rounding once, exactly like the CPU kernel (so f32, f64,
// bf16 and f16 results are bitwise equal to the CPU's):
//   1. stable sort of the token positions by index: an LSD radix sort, 8 bits
//      per pass (ceil(bits(rows - 1) / 8) passes; none for a 1-row table). Each
//      pass: one warp per chunk of kSortChunk tokens counts its digits, one block
//      scans the [digit, chunk] counts, then each warp places its tokens 32 at a
//      time in order (__match_any_sync ranks equal digits by lane), so equal
//      indices keep increasing token order;
//   2. one warp per (table row, 32 * kVec<T> columns): binary search of the
//      row's tokens in the sorted indices, then each lane sums its kVec<T>
//      columns over those tokens in order. Rows no token looked up get 0.
// Integer atomics appear only in shared-memory digit counts (order-independent),
// so the result is bitwise the same on every run.
//
// `workspace` must hold embedding_backward_workspace_bytes(tokens) bytes of device
// memory (null when that is 0). Launchers enqueue on `stream` and return without
// synchronizing.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace dtr::kernels::cuda {

// Tokens per chunk of the radix sort's counting and placing steps.
inline constexpr int64_t kSortChunk = 1024;

// out[t, :] = table[indices[t], :] for t in [0, tokens). Any element type.
template <class T>
void embedding_forward(const T* table, int64_t cols, const int64_t* indices, int64_t tokens,
                       T* out, cudaStream_t stream);

size_t embedding_backward_workspace_bytes(int64_t tokens);

// grad_table[r, :] = sum over t with indices[t] == r of grad_out[t, :] (in token
// order), for every r in [0, rows): grad_table is fully written. Floating T only.
template <class T>
void embedding_backward(const T* grad_out, const int64_t* indices, int64_t tokens, int64_t rows,
                        int64_t cols, T* grad_table, void* workspace, cudaStream_t stream);

}  // namespace dtr::kernels::cuda
