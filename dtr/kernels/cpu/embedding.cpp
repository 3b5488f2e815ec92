#include "dtr/kernels/cpu/embedding.h"

#include "dtr/kernels/cpu/parallel.h"
#include "dtr/kernels/scalar_types.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace dtr::kernels::cpu::DTR_CPU_LEVEL {

template <class T>
void embedding_forward(const T* table, int64_t cols, const int64_t* indices, int64_t tokens,
                       T* out) {
  if (tokens <= 0 || cols <= 0) return;
  parallel_for(0, tokens, (kParallelGrain + cols - 1) / cols, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      std::memcpy(out + t * cols, table + indices[t] * cols, static_cast<size_t>(cols) * sizeof(T));
    }
  });
}

namespace {

// The rows' sums of embedding_backward, handed to store(dst_row, acc) for each row
// some token looked up, or to skip(dst_row) for each row none did.
template <class T, class Store, class Skip>
void sum_rows_by_index(const T* grad_out, const int64_t* indices, int64_t tokens, int64_t rows, int64_t cols,
                       T* grad_table, const Store& store, const Skip& skip) {
  using Acc = acc_t<T>;
  if (rows <= 0 || cols <= 0) return;
  // Bucket tokens by row, keeping token order within a row: start[r] .. start[r + 1]
  // in `order` are the tokens that looked up row r.
  std::vector<int64_t> start(static_cast<size_t>(rows) + 1, 0);
  for (int64_t t = 0; t < tokens; ++t) ++start[indices[t] + 1];
  for (int64_t r = 0; r < rows; ++r) start[r + 1] += start[r];
  std::vector<int64_t> order(static_cast<size_t>(std::max<int64_t>(tokens, 0)));
  {
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t t = 0; t < tokens; ++t) order[next[indices[t]]++] = t;
  }
  // Grain: about kParallelGrain elements of output plus the tokens they gather.
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / (cols * (1 + tokens / rows)));
  parallel_for(0, rows, grain, [&](int64_t lo, int64_t hi) {
    std::vector<Acc> acc(static_cast<size_t>(cols));
    for (int64_t r = lo; r < hi; ++r) {
      T* dst = grad_table + r * cols;
      if (start[r] == start[r + 1]) {
        skip(dst);
        continue;
      }
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t k = start[r]; k < start[r + 1]; ++k) {
        const T* src = grad_out + order[k] * cols;
        for (int64_t c = 0; c < cols; ++c) acc[c] += convert<Acc>(src[c]);
      }
      store(dst, acc.data());
    }
  });
}

}  // namespace

template <class T>
void embedding_backward(const T* grad_out, const int64_t* indices, int64_t tokens, int64_t rows,
                        int64_t cols, T* grad_table) {
  sum_rows_by_index(
      grad_out, indices, tokens, rows, cols, grad_table,
      [&](T* dst, const acc_t<T>* acc) {
        for (int64_t c = 0; c < cols; ++c) dst[c] = convert<T>(acc[c]);
      },
      [&](T* dst) { std::fill(dst, dst + cols, T(0)); });
}

template <class T>
void embedding_backward_add(const T* grad_out, const int64_t* indices, int64_t tokens, int64_t rows,
                            int64_t cols, T* grad_table) {
  using Acc = acc_t<T>;
  sum_rows_by_index(
      grad_out, indices, tokens, rows, cols, grad_table,
      [&](T* dst, const Acc* acc) {
        // The row's gradient rounded to T, then added as the add op adds two T tensors.
        for (int64_t c = 0; c < cols; ++c) {
          dst[c] = convert<T>(convert<Acc>(dst[c]) + convert<Acc>(convert<T>(acc[c])));
        }
      },
      [](T*) {});
}

#define DTR_INSTANTIATE_EMBEDDING_FORWARD(T) \
  template void embedding_forward<T>(const T*, int64_t, const int64_t*, int64_t, T*);
DTR_FOR_EACH_SCALAR(DTR_INSTANTIATE_EMBEDDING_FORWARD)

#define DTR_INSTANTIATE_EMBEDDING_BACKWARD(T)                                                  \
  template void embedding_backward<T>(const T*, const int64_t*, int64_t, int64_t, int64_t, T*); \
  template void embedding_backward_add<T>(const T*, const int64_t*, int64_t, int64_t, int64_t, T*);
DTR_FOR_EACH_FLOATING(DTR_INSTANTIATE_EMBEDDING_BACKWARD)

}  // namespace dtr::kernels::cpu::DTR_CPU_LEVEL
