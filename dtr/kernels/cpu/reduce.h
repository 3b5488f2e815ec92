// Row reductions on the CPU: sum, mean, max, min and argmax of each row of a
// contiguous [rows, cols] buffer, one result per row. The op layer
// (dtr/tensor/ops/reduce.h) permutes the reduced dims last and makes the input
// contiguous before calling these; sums and means over leading dims of a
// contiguous input go to the column kernels (sum_cols, mean_cols) instead.
//
// Accumulation happens in acc_t<T> (float for bf16/f16, int64 for integers).
// Sums are pairwise (error grows like log n, not n). A row longer than
// kReduceChunk is split into fixed chunks whose partial results are combined in
// a fixed order, so results are bitwise the same for any thread count. Work is
// spread across threads (over rows, or over the chunks of long rows) when it
// reaches kParallelGrain elements.
//
// Floating max/min propagate NaN: a row holding a NaN reduces to NaN, and its
// argmax is the index of the first NaN. Otherwise argmax is the first index of
// the maximum. Empty rows (cols == 0) give sum 0, mean NaN, max -inf (the
// lowest value for integers), min +inf (the highest), argmax -1; the op layer
// reports max/min/argmax over nothing as an error before getting here.
#pragma once

#include "dtr/kernels/cpu/cpu_level.h"
#include "dtr/kernels/scalar_types.h"

#include <cstdint>
#include <type_traits>

namespace dtr::kernels::cpu {

// Elements per chunk of a long row: the unit of the fixed reduction order.
inline constexpr int64_t kReduceChunk = 32768;

// What a sum of T produces: T for floating types, int64 for integer types (like torch.sum).
template <class T>
using sum_out_t = std::conditional_t<is_floating_v<T>, T, int64_t>;

DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void sum_rows(const T* in, int64_t rows, int64_t cols, sum_out_t<T>* out);)
template <class T>
void sum_rows(const T* in, int64_t rows, int64_t cols, sum_out_t<T>* out) {
  return DTR_CPU_DISPATCH(sum_rows<T>)(in, rows, cols, out);
}

// The sum down each column of a contiguous [outer, inner] buffer, one result per
// column, read in place: out[j] is bitwise what sum_rows gives for the row of
// column j's values (a bias gradient, [tokens, features] summed over tokens,
// without the transposed copy the row kernel would need).
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void sum_cols(const T* in, int64_t outer, int64_t inner, sum_out_t<T>* out);)
template <class T>
void sum_cols(const T* in, int64_t outer, int64_t inner, sum_out_t<T>* out) {
  return DTR_CPU_DISPATCH(sum_cols<T>)(in, outer, inner, out);
}

// Floating T only.
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void mean_cols(const T* in, int64_t outer, int64_t inner, T* out);)
template <class T>
void mean_cols(const T* in, int64_t outer, int64_t inner, T* out) {
  return DTR_CPU_DISPATCH(mean_cols<T>)(in, outer, inner, out);
}

// Floating T only.
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void mean_rows(const T* in, int64_t rows, int64_t cols, T* out);)
template <class T>
void mean_rows(const T* in, int64_t rows, int64_t cols, T* out) {
  return DTR_CPU_DISPATCH(mean_rows<T>)(in, rows, cols, out);
}

DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void max_rows(const T* in, int64_t rows, int64_t cols, T* out);)
template <class T>
void max_rows(const T* in, int64_t rows, int64_t cols, T* out) {
  return DTR_CPU_DISPATCH(max_rows<T>)(in, rows, cols, out);
}

DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void min_rows(const T* in, int64_t rows, int64_t cols, T* out);)
template <class T>
void min_rows(const T* in, int64_t rows, int64_t cols, T* out) {
  return DTR_CPU_DISPATCH(min_rows<T>)(in, rows, cols, out);
}

// out[r] is the index within row r (0 <= out[r] < cols).
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void argmax_rows(const T* in, int64_t rows, int64_t cols, int64_t* out);)
template <class T>
void argmax_rows(const T* in, int64_t rows, int64_t cols, int64_t* out) {
  return DTR_CPU_DISPATCH(argmax_rows<T>)(in, rows, cols, out);
}

}  // namespace dtr::kernels::cpu
