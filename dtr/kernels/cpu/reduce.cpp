#include "dtr/kernels/cpu/reduce.h"

#include "dtr/kernels/cpu/parallel.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

namespace dtr::kernels::cpu::DTR_CPU_LEVEL {

namespace {

// Pairwise summation (as in NumPy): leaves of kPairwiseLeaf elements are summed
// in kLanes independent accumulators, then halves are added recursively.
constexpr int64_t kPairwiseLeaf = 128;
constexpr int kLanes = 8;

template <class Acc, class T>
Acc pairwise_sum(const T* p, int64_t n) {
  if (n <= kPairwiseLeaf) {
    Acc lanes[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (int k = 0; k < kLanes; ++k) lanes[k] += convert<Acc>(p[i + k]);
    }
    Acc tail = 0;
    for (; i < n; ++i) tail += convert<Acc>(p[i]);
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
           ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])) + tail;
  }
  const int64_t half = n / 2 / kLanes * kLanes;  // split on a lane boundary
  return pairwise_sum<Acc>(p, half) + pairwise_sum<Acc>(p + half, n - half);
}

template <class Acc>
bool is_nan(Acc v) {
  if constexpr (std::is_floating_point_v<Acc>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

// The driver shared by every reduction. Each row is cut into pieces of at most
// kReduceChunk elements; chunk(row, begin, end) reduces one piece to a Partial,
// combine(parts, n) folds a row's pieces in order, store(row_index, partial)
// writes the result. The pieces depend only on cols, never on the thread count.
template <class Partial, class T, class ChunkFn, class CombineFn, class StoreFn>
void reduce_rows(const T* in, int64_t rows, int64_t cols, const ChunkFn& chunk,
                 const CombineFn& combine, const StoreFn& store) {
  if (rows <= 0) return;
  const int64_t chunks = cols <= kReduceChunk ? 1 : (cols + kReduceChunk - 1) / kReduceChunk;
  if (chunks == 1) {
    const int64_t grain = cols > 0 ? (kParallelGrain + cols - 1) / cols : rows;
    parallel_for(0, rows, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) store(r, chunk(in + r * cols, 0, cols));
    });
    return;
  }
  // Long rows: every (row, piece) pair is a task of kReduceChunk >= kParallelGrain elements.
  std::vector<Partial> parts(static_cast<size_t>(rows * chunks));
  parallel_for(0, rows * chunks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t r = i / chunks;
      const int64_t begin = (i % chunks) * kReduceChunk;
      parts[i] = chunk(in + r * cols, begin, std::min(cols, begin + kReduceChunk));
    }
  });
  for (int64_t r = 0; r < rows; ++r) store(r, combine(parts.data() + r * chunks, chunks));
}

enum class SumKind { sum, mean };

template <class T>
void sum_or_mean(SumKind kind, const T* in, int64_t rows, int64_t cols, sum_out_t<T>* out) {
  using Acc = acc_t<T>;
  reduce_rows<Acc>(
      in, rows, cols,
      [](const T* row, int64_t begin, int64_t end) {
        return pairwise_sum<Acc>(row + begin, end - begin);
      },
      [](const Acc* parts, int64_t n) { return pairwise_sum<Acc>(parts, n); },
      [&](int64_t r, Acc total) {
        if (kind == SumKind::mean) total /= static_cast<Acc>(cols);  // 0 / 0 = NaN for an empty row
        out[r] = convert<sum_out_t<T>>(total);
      });
}

// The value an empty row reduces to: -inf (or the lowest value) for max, the opposite for min.
template <class Acc, class Better>
Acc identity() {
  constexpr bool is_max = std::is_same_v<Better, std::greater<>>;
  if constexpr (std::numeric_limits<Acc>::has_infinity) {
    return is_max ? -std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::infinity();
  } else {
    return is_max ? std::numeric_limits<Acc>::lowest() : std::numeric_limits<Acc>::max();
  }
}

// max (Better = std::greater<>) or min (std::less<>), NaN-propagating.
template <class T, class Better>
void extreme_rows(const T* in, int64_t rows, int64_t cols, T* out) {
  using Acc = acc_t<T>;
  const Better better;
  auto fold = [&](const auto* p, int64_t n) {
    Acc best = identity<Acc, Better>();
    for (int64_t i = 0; i < n; ++i) {
      const Acc v = convert<Acc>(p[i]);
      if (better(v, best)) {
        best = v;
      } else if (is_nan(v)) {
        return v;
      }
    }
    return best;
  };
  reduce_rows<Acc>(
      in, rows, cols,
      [&](const T* row, int64_t begin, int64_t end) { return fold(row + begin, end - begin); },
      [&](const Acc* parts, int64_t n) { return fold(parts, n); },
      [&](int64_t r, Acc best) { out[r] = convert<T>(best); });
}

// Columns [0, width) of rows [0, n) (row stride ld), each summed down its column
// in exactly the order pairwise_sum sums a contiguous run of n values: the same
// splits, leaves and lanes, kColumnBlock columns side by side (so that the
// compiler vectorizes across columns). width <= kColumnBlock.
constexpr int64_t kColumnBlock = 64;

template <class Acc, class T>
void pairwise_sum_columns(const T* p, int64_t ld, int64_t n, int64_t width, Acc* out) {
  if (n <= kPairwiseLeaf) {
    Acc lanes[kLanes][kColumnBlock] = {};
    Acc tail[kColumnBlock] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (int k = 0; k < kLanes; ++k) {
        const T* row = p + (i + k) * ld;
        for (int64_t j = 0; j < width; ++j) lanes[k][j] += convert<Acc>(row[j]);
      }
    }
    for (; i < n; ++i) {
      for (int64_t j = 0; j < width; ++j) tail[j] += convert<Acc>(p[i * ld + j]);
    }
    for (int64_t j = 0; j < width; ++j) {
      out[j] = ((lanes[0][j] + lanes[1][j]) + (lanes[2][j] + lanes[3][j])) +
               ((lanes[4][j] + lanes[5][j]) + (lanes[6][j] + lanes[7][j])) + tail[j];
    }
    return;
  }
  const int64_t half = n / 2 / kLanes * kLanes;  // pairwise_sum's split
  Acc upper[kColumnBlock];
  pairwise_sum_columns<Acc>(p, ld, half, width, out);
  pairwise_sum_columns<Acc>(p + half * ld, ld, n - half, width, upper);
  for (int64_t j = 0; j < width; ++j) out[j] += upper[j];
}

// Sums (or means) down the columns of a contiguous [outer, inner] input, column
// j giving bitwise what sum_or_mean gives for the row holding column j's values:
// pieces of kReduceChunk rows, then their partial sums, each pairwise. The tasks
// are (block of columns, piece) pairs, as reduce_rows' are (row, piece) pairs.
template <class T>
void sum_or_mean_columns(SumKind kind, const T* in, int64_t outer, int64_t inner, sum_out_t<T>* out) {
  using Acc = acc_t<T>;
  if (inner <= 0) return;
  const int64_t pieces = outer <= kReduceChunk ? 1 : (outer + kReduceChunk - 1) / kReduceChunk;
  const int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
  auto store = [&](int64_t j0, int64_t width, const Acc* total) {
    for (int64_t j = 0; j < width; ++j) {
      Acc v = total[j];
      if (kind == SumKind::mean) v /= static_cast<Acc>(outer);  // 0 / 0 = NaN for no rows
      out[j0 + j] = convert<sum_out_t<T>>(v);
    }
  };
  // pieces > 1: each task's partial sums, [block][piece][kColumnBlock].
  std::vector<Acc> partials(pieces > 1 ? static_cast<size_t>(blocks * pieces * kColumnBlock) : 0);
  const int64_t task_elements = std::min(outer, kReduceChunk) * kColumnBlock;
  parallel_for(0, blocks * pieces, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, task_elements)),
               [&](int64_t lo, int64_t hi) {
                 Acc total[kColumnBlock];
                 for (int64_t task = lo; task < hi; ++task) {
                   const int64_t j0 = task / pieces * kColumnBlock, width = std::min(kColumnBlock, inner - j0);
                   const int64_t begin = task % pieces * kReduceChunk;
                   const int64_t rows = std::min(outer, begin + kReduceChunk) - begin;
                   Acc* dst = pieces > 1 ? partials.data() + task * kColumnBlock : total;
                   pairwise_sum_columns<Acc>(in + begin * inner + j0, inner, rows, width, dst);
                   if (pieces == 1) store(j0, width, total);
                 }
               });
  if (pieces == 1) return;
  Acc total[kColumnBlock];
  for (int64_t j0 = 0; j0 < inner; j0 += kColumnBlock) {
    const int64_t width = std::min(kColumnBlock, inner - j0);
    pairwise_sum_columns<Acc>(partials.data() + j0 * pieces, kColumnBlock, pieces, width, total);
    store(j0, width, total);
  }
}

template <class Acc>
struct ValueIndex {
  Acc value;
  int64_t index;
};

}  // namespace

template <class T>
void sum_rows(const T* in, int64_t rows, int64_t cols, sum_out_t<T>* out) {
  sum_or_mean(SumKind::sum, in, rows, cols, out);
}

template <class T>
void mean_rows(const T* in, int64_t rows, int64_t cols, T* out) {
  static_assert(is_floating_v<T>, "mean_rows is defined for floating types only");
  sum_or_mean(SumKind::mean, in, rows, cols, out);
}

template <class T>
void sum_cols(const T* in, int64_t outer, int64_t inner, sum_out_t<T>* out) {
  sum_or_mean_columns(SumKind::sum, in, outer, inner, out);
}

template <class T>
void mean_cols(const T* in, int64_t outer, int64_t inner, T* out) {
  static_assert(is_floating_v<T>, "mean_cols is defined for floating types only");
  sum_or_mean_columns(SumKind::mean, in, outer, inner, out);
}

template <class T>
void max_rows(const T* in, int64_t rows, int64_t cols, T* out) {
  extreme_rows<T, std::greater<>>(in, rows, cols, out);
}

template <class T>
void min_rows(const T* in, int64_t rows, int64_t cols, T* out) {
  extreme_rows<T, std::less<>>(in, rows, cols, out);
}

template <class T>
void argmax_rows(const T* in, int64_t rows, int64_t cols, int64_t* out) {
  using Acc = acc_t<T>;
  using Best = ValueIndex<Acc>;
  reduce_rows<Best>(
      in, rows, cols,
      [](const T* row, int64_t begin, int64_t end) {
        if (begin == end) return Best{identity<Acc, std::greater<>>(), -1};
        Best best{convert<Acc>(row[begin]), begin};
        if (is_nan(best.value)) return best;
        for (int64_t i = begin + 1; i < end; ++i) {
          const Acc v = convert<Acc>(row[i]);
          if (v > best.value) {
            best = {v, i};
          } else if (is_nan(v)) {
            return Best{v, i};
          }
        }
        return best;
      },
      [](const Best* parts, int64_t n) {
        Best best = parts[0];
        for (int64_t k = 0; k < n && !is_nan(best.value); ++k) {
          if (parts[k].value > best.value || is_nan(parts[k].value)) best = parts[k];
        }
        return best;
      },
      [&](int64_t r, Best best) { out[r] = best.index; });
}

#define DTR_INSTANTIATE_REDUCE(T)                                       \
  template void sum_rows<T>(const T*, int64_t, int64_t, sum_out_t<T>*); \
  template void sum_cols<T>(const T*, int64_t, int64_t, sum_out_t<T>*); \
  template void max_rows<T>(const T*, int64_t, int64_t, T*);            \
  template void min_rows<T>(const T*, int64_t, int64_t, T*);            \
  template void argmax_rows<T>(const T*, int64_t, int64_t, int64_t*);
DTR_FOR_EACH_SCALAR(DTR_INSTANTIATE_REDUCE)

#define DTR_INSTANTIATE_MEAN(T)                                  \
  template void mean_rows<T>(const T*, int64_t, int64_t, T*); \
  template void mean_cols<T>(const T*, int64_t, int64_t, T*);
DTR_FOR_EACH_FLOATING(DTR_INSTANTIATE_MEAN)

}  // namespace dtr::kernels::cpu::DTR_CPU_LEVEL
