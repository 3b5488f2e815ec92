// Embedding lookup on the CPU: gather rows of a contiguous [rows, cols] table
// by int64 index, and the matching deterministic scatter-add backward. The op
// layer (dtr/tensor/ops/nn.h) checks that every index is in [0, rows) first; the
// kernels trust it.
//
// The backward sums, for each table row, the gradients of the tokens that
// looked it up, in token order, in acc_t<T> (float for bf16/f16), and rounds
// once. Tokens are bucketed by row with one stable counting pass (no comparison
// sort, O(tokens + rows)); table rows are then spread across threads, each row
// summed by one thread in token order, so the result is bitwise the same for any
// thread count. Rows no token looked up get 0.
#pragma once

#include "dtr/kernels/cpu/cpu_level.h"

#include <cstdint>

namespace dtr::kernels::cpu {

// out[t, :] = table[indices[t], :] for t in [0, tokens). Any element type.
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void embedding_forward(const T* table, int64_t cols, const int64_t* indices,
                                              int64_t tokens, T* out);)
template <class T>
void embedding_forward(const T* table, int64_t cols, const int64_t* indices, int64_t tokens,
                       T* out) {
  return DTR_CPU_DISPATCH(embedding_forward<T>)(table, cols, indices, tokens, out);
}

// grad_table[r, :] = sum over t with indices[t] == r of grad_out[t, :], for every
// r in [0, rows) (grad_table is fully written). Floating T only.
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void embedding_backward(const T* grad_out, const int64_t* indices,
                                               int64_t tokens, int64_t rows, int64_t cols,
                                               T* grad_table);)
template <class T>
void embedding_backward(const T* grad_out, const int64_t* indices, int64_t tokens, int64_t rows,
                        int64_t cols, T* grad_table) {
  return DTR_CPU_DISPATCH(embedding_backward<T>)(grad_out, indices, tokens, rows, cols, grad_table);
}

// grad_table[r, :] += the same sum for every r some token looked up, the sum rounded
// to T and then added as the add op adds two T tensors (in opmath, rounded once);
// rows no token looked up are left as they are. So a gradient already summed for
// the table (a tied output layer's) gets the embedding's added in place, bitwise as
// adding embedding_backward's result would (but that a -0 stays -0 in rows no token
// looked up, where adding 0 would make it +0). Floating T only.
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void embedding_backward_add(const T* grad_out, const int64_t* indices,
                                                   int64_t tokens, int64_t rows, int64_t cols,
                                                   T* grad_table);)
template <class T>
void embedding_backward_add(const T* grad_out, const int64_t* indices, int64_t tokens, int64_t rows,
                            int64_t cols, T* grad_table) {
  return DTR_CPU_DISPATCH(embedding_backward_add<T>)(grad_out, indices, tokens, rows, cols, grad_table);
}

}  // namespace dtr::kernels::cpu
