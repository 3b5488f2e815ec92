#include "dtr/kernels/cpu/gemm.h"

#include "dtr/kernels/cpu/gemm_packed.h"
#include "dtr/kernels/cpu/gemm_register_tile.h"
#include "dtr/kernels/cpu/parallel.h"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

namespace dtr::kernels::cpu::DTR_CPU_LEVEL {

namespace {

template <class T>
using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using MatrixMap = Eigen::Map<RowMajorMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using ConstMatrixMap = Eigen::Map<const RowMajorMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

// Multiply-adds below which a GEMM (or a whole batch) stays on the calling thread.
constexpr int64_t kParallelMacs = int64_t{1} << 20;

// Half-type GEMMs are computed tile by tile through a float buffer: a C tile of
// kHalfTileM x kHalfTileN accumulates over all of k (1.5 MiB at avx512), its
// operands widened to float as the packed GEMM packs them.
constexpr int64_t kHalfTileM = detail::kTileRows * 32;
constexpr int64_t kHalfTileN = detail::kTileCols * 32;

// Where a threaded GEMM may cut C: rows at multiples of kRowQuantum, columns at
// multiples of kColQuantum. Cuts must not change the order in which any element
// of C is summed, so results do not depend on the thread count:
// - float: dtr's packed GEMM (gemm_packed.h) sums every element alike wherever it
//   lies; cuts fall between register tiles only so that no tile is split in two.
// - double: Eigen computes row-major C as the column-major product B^T A^T,
//   with register blocks of nr (4 or 8) rows of C and mr (3 packets: 6..48)
//   columns of C; elements in full blocks and in remainder blocks take different
//   code paths, while k is blocked from k alone. Cuts at multiples of 64 rows and
//   96 columns (multiples of every nr and mr) keep each element's path.
// - bf16/f16: the same packed GEMM, summing into float tiles; the same cuts.
template <class T>
constexpr int64_t kRowQuantum = std::is_same_v<T, double> ? 64 : detail::kTileRows;
template <class T>
constexpr int64_t kColQuantum = std::is_same_v<T, double> ? 96 : detail::kTileCols;

// One GEMM problem; `rows` and `cols` give the sub-problems for parts of C.
template <class T>
struct Problem {
  Transpose trans_a, trans_b;
  int64_t m, n, k;
  acc_t<T> alpha, beta;
  const T* a;
  int64_t lda;
  const T* b;
  int64_t ldb;
  T* c;
  int64_t ldc;
  GemmEpilogue<T> epilogue;  // pre, when set, has C's leading dim
  // float only: op(A) packed whole (gemm_packed.h), shared by the threads.
  const float* a_packed = nullptr;

  int64_t macs() const { return m * n * std::max<int64_t>(k, 1); }

  // Rows [begin, end) of C: the same rows of op(A), all of op(B).
  Problem rows(int64_t begin, int64_t end) const {
    Problem p = *this;
    p.m = end - begin;
    p.a += begin * (trans_a == Transpose::no ? lda : 1);
    p.c += begin * ldc;
    if (p.epilogue.pre) p.epilogue.pre += begin * ldc;
    return p;
  }
  // Columns [begin, end) of C: all of op(A), the same columns of op(B).
  Problem cols(int64_t begin, int64_t end) const {
    Problem p = *this;
    p.n = end - begin;
    p.b += begin * (trans_b == Transpose::no ? 1 : ldb);
    p.c += begin;
    if (p.epilogue.bias) p.epilogue.bias += begin;
    if (p.epilogue.pre) p.epilogue.pre += begin;
    return p;
  }
};

// A stored row-major matrix, transposed or not, as an Eigen expression handed to fn.
template <class T, class Fn>
void with_op(Transpose trans, const T* data, int64_t rows, int64_t cols, int64_t ld, Fn&& fn) {
  if (trans == Transpose::no) {
    fn(ConstMatrixMap<T>(data, rows, cols, Eigen::OuterStride<>(ld)));
  } else {
    fn(ConstMatrixMap<T>(data, cols, rows, Eigen::OuterStride<>(ld)).transpose());
  }
}

// C = beta * C, where beta == 0 overwrites C (NaN included).
template <class T>
void scale(MatrixMap<T> c, T beta) {
  if (beta == T(0)) {
    c.setZero();
  } else if (beta != T(1)) {
    c *= beta;
  }
}

// C[i, :] = act(C[i, :] + bias) for float / double, whose product is already rounded;
// one simple loop per step, so that each vectorizes (tanh-GELU's loop of its own:
// through apply_gemm_activation's switch, which also calls libm's erfc, it would not).
template <class T>
void apply_epilogue(const Problem<T>& p) {
  const GemmEpilogue<T>& e = p.epilogue;
  if (e.trivial()) return;
  for (int64_t i = 0; i < p.m; ++i) {
    T* c = p.c + i * p.ldc;
    if (e.bias) {
      for (int64_t j = 0; j < p.n; ++j) c[j] += e.bias[j];
    }
    if (e.activation == GemmActivation::none) continue;
    if (e.pre) std::copy(c, c + p.n, e.pre + i * p.ldc);
    if (e.activation == GemmActivation::gelu_tanh) {
      for (int64_t j = 0; j < p.n; ++j) c[j] = ew::GeluTanh{}(c[j]);
    } else {
      for (int64_t j = 0; j < p.n; ++j) c[j] = apply_gemm_activation(e.activation, c[j]);
    }
  }
}

// The product of float (dtr's packed GEMM) / double (Eigen's) on the calling thread,
// before the epilogue.
template <class T>
void run_product(const Problem<T>& p) {
  MatrixMap<T> c(p.c, p.m, p.n, Eigen::OuterStride<>(p.ldc));
  if (p.alpha == T(0) || p.k == 0) {
    scale<T>(c, p.beta);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    packed_gemm<float>(p.trans_a, p.trans_b, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, p.c,
                       p.ldc, p.a_packed);
    return;
  }
  with_op(p.trans_a, p.a, p.m, p.k, p.lda, [&](const auto& a) {
    with_op(p.trans_b, p.b, p.k, p.n, p.ldb, [&](const auto& b) {
      if (p.beta == T(0)) {
        c.noalias() = p.alpha * a * b;  // Eigen zeroes (or assigns) C before accumulating
      } else {
        scale<T>(c, p.beta);
        c.noalias() += p.alpha * a * b;
      }
    });
  });
}

template <class T>
void run_native(const Problem<T>& p) {
  run_product(p);
  apply_epilogue(p);
}

// bf16 / f16 on the calling thread: per C tile, accumulate op(A) . op(B) in a
// float buffer over all of k, then C = round(alpha * acc + beta * C + bias) once
// (and the activation of that).
template <class T>
void run_half(const Problem<T>& p) {
  const bool product = p.alpha != 0.0f && p.k > 0;
  thread_local std::vector<float> acc;
  acc.resize(static_cast<size_t>(std::min(p.m, kHalfTileM) * std::min(p.n, kHalfTileN)));
  for (int64_t i0 = 0; i0 < p.m; i0 += kHalfTileM) {
    const int64_t mb = std::min(kHalfTileM, p.m - i0);
    for (int64_t j0 = 0; j0 < p.n; j0 += kHalfTileN) {
      const int64_t nb = std::min(kHalfTileN, p.n - j0);
      if (product) {
        const T* a = p.a + i0 * (p.trans_a == Transpose::no ? p.lda : 1);
        const T* b = p.b + j0 * (p.trans_b == Transpose::no ? 1 : p.ldb);
        // alpha 1: the epilogue applies alpha once, to the full sums.
        packed_gemm<T>(p.trans_a, p.trans_b, mb, nb, p.k, 1.0f, a, p.lda, b, p.ldb, 0.0f, acc.data(), nb);
      }
      const GemmEpilogue<T>& e = p.epilogue;
      const bool plain = product && p.beta == 0.0f && !e.bias && e.activation == GemmActivation::none;
      for (int64_t i = 0; i < mb; ++i) {
        T* c = p.c + (i0 + i) * p.ldc + j0;
        T* pre = e.pre ? e.pre + (i0 + i) * p.ldc + j0 : nullptr;
        const float* s = acc.data() + i * nb;
        if (plain) {  // the common case, as a loop without branches that vectorizes
          for (int64_t j = 0; j < nb; ++j) c[j] = T(p.alpha * s[j]);
          continue;
        }
        for (int64_t j = 0; j < nb; ++j) {
          float v = product ? p.alpha * s[j] : 0.0f;
          if (p.beta != 0.0f) v += p.beta * static_cast<float>(c[j]);
          if (e.bias) v += static_cast<float>(e.bias[j0 + j]);
          const T rounded(v);
          if (e.activation == GemmActivation::none) {
            c[j] = rounded;
          } else {
            if (pre) pre[j] = rounded;
            c[j] = T(apply_gemm_activation(e.activation, static_cast<float>(rounded)));
          }
        }
      }
    }
  }
}

template <class T>
void run_serial(const Problem<T>& p) {
  if (p.m == 0 || p.n == 0) return;
  if constexpr (is_half_v<T>) {
    run_half(p);
  } else {
    run_native(p);
  }
}

// The longest chunk when `size` is cut at multiples of `quantum` into at most
// `threads` chunks the way parallel_for cuts it.
int64_t longest_chunk(int64_t size, int64_t quantum, int threads) {
  const int64_t units = (size + quantum - 1) / quantum;
  const int64_t chunks = std::min<int64_t>(threads, units);
  const int64_t per_chunk = (units + chunks - 1) / chunks;
  return std::min(size, per_chunk * quantum);
}

// That chunk as a fraction of `size`.
double worst_share(int64_t size, int64_t quantum, int threads) {
  return static_cast<double>(longest_chunk(size, quantum, threads)) / static_cast<double>(size);
}

// The largest op(A) (in floats, 32 MiB) that the threads of one f32 GEMM pack
// together, once, rather than each for itself.
constexpr int64_t kMaxSharedPackFloats = int64_t{8} << 20;

// For float cut by columns into parts of `part_cols`: op(A), which every thread reads
// whole, packed once by all threads together and shared, when a part is so wide that
// packed_gemm would pack op(A) again for each of its blocks of columns. Otherwise each
// thread packs for itself what it reads (so op(B) when C is cut by rows, which
// packed_gemm packs once anyway): a shared operand larger than a core's L2 is read
// back from L3 whole by every thread on top of the part each packed, which measured
// slower than each packing its own (bench/notes/cpu_levels.md).
template <class T>
Problem<T> with_shared_a(Problem<T> p, int64_t part_cols) {
  if constexpr (std::is_same_v<T, float>) {
    if (p.alpha == 0.0f || p.k == 0 || packs_a_once(part_cols) ||
        packed_a_floats(p.m, p.k) > kMaxSharedPackFloats) {
      return p;
    }
    float* packed = whole_pack_buffer(packed_a_floats(p.m, p.k));
    parallel_for(0, packed_a_panels(p.m), 1, [&](int64_t lo, int64_t hi) {
      pack_whole_a(p.trans_a, p.a, p.lda, p.m, p.k, lo, hi, packed);
    });
    p.a_packed = packed;
  }
  return p;
}

// One GEMM over all threads: cut along rows or columns of C, whichever balances
// better. Each thread reads all of the operand that is not cut (all of op(B) when
// cutting rows, all of op(A) when cutting columns) and packs it for itself, unless
// op(A) is packed once for all (with_shared_a). So when both balance alike (within
// kBalanceSlack of the work) the cut goes across the larger operand: with n > m (a
// linear layer's forward on a few hundred tokens) cutting rows would have every
// thread read and pack the whole weight.
template <class T>
void run_split(const Problem<T>& p) {
  const int threads = num_threads();
  const int64_t row_units = (p.m + kRowQuantum<T> - 1) / kRowQuantum<T>;
  const int64_t col_units = (p.n + kColQuantum<T> - 1) / kColQuantum<T>;
  if (threads <= 1 || p.macs() < kParallelMacs || (row_units < 2 && col_units < 2)) {
    run_serial(p);
    return;
  }
  const double row_share = worst_share(p.m, kRowQuantum<T>, threads);
  const double col_share = worst_share(p.n, kColQuantum<T>, threads);
  constexpr double kBalanceSlack = 0.02;
  const bool alike = std::abs(row_share - col_share) <= kBalanceSlack;
  const bool by_rows = row_units >= 2 && (col_units < 2 || (alike ? p.m >= p.n : row_share < col_share));
  if (by_rows) {
    parallel_for(0, row_units, 1, [&](int64_t lo, int64_t hi) {
      run_serial(p.rows(lo * kRowQuantum<T>, std::min(p.m, hi * kRowQuantum<T>)));
    });
  } else {
    const Problem<T> shared = with_shared_a(p, longest_chunk(p.n, kColQuantum<T>, threads));
    parallel_for(0, col_units, 1, [&](int64_t lo, int64_t hi) {
      run_serial(shared.cols(lo * kColQuantum<T>, std::min(p.n, hi * kColQuantum<T>)));
    });
  }
}

}  // namespace

template <class T>
void gemm(Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k, acc_t<T> alpha,
          const T* a, int64_t lda, const T* b, int64_t ldb, acc_t<T> beta, T* c, int64_t ldc,
          const GemmEpilogue<T>& epilogue) {
  gemm_batched<T>(1, trans_a, trans_b, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, epilogue);
}

template <class T>
void gemm_batched(int64_t batch, Transpose trans_a, Transpose trans_b, int64_t m, int64_t n,
                  int64_t k, acc_t<T> alpha, const T* a, int64_t lda, int64_t batch_stride_a,
                  const T* b, int64_t ldb, int64_t batch_stride_b, acc_t<T> beta, T* c, int64_t ldc,
                  int64_t batch_stride_c, const GemmEpilogue<T>& epilogue) {
  if (batch <= 0 || m == 0 || n == 0) return;
  const Problem<T> first{.trans_a = trans_a,
                         .trans_b = trans_b,
                         .m = m,
                         .n = n,
                         .k = k,
                         .alpha = alpha,
                         .beta = beta,
                         .a = a,
                         .lda = lda,
                         .b = b,
                         .ldb = ldb,
                         .c = c,
                         .ldc = ldc,
                         .epilogue = epilogue.normalized()};
  auto entry = [&](int64_t i) {
    Problem<T> p = first;
    // With k == 0 the operands may be empty tensors with no data (null).
    if (p.a != nullptr) p.a += i * batch_stride_a;
    if (p.b != nullptr) p.b += i * batch_stride_b;
    p.c += i * batch_stride_c;
    if (p.epilogue.pre) p.epilogue.pre += i * batch_stride_c;
    return p;
  };
  // Many (or small) matrices: one thread per group of whole matrices.
  if (batch >= num_threads() || first.macs() < kParallelMacs) {
    const int64_t grain = std::max<int64_t>(1, kParallelMacs / first.macs());
    parallel_for(0, batch, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) run_serial(entry(i));
    });
    return;
  }
  // Fewer large matrices than threads: each one over all threads.
  for (int64_t i = 0; i < batch; ++i) run_split(entry(i));
}

#define DTR_INSTANTIATE_GEMM(T)                                                                   \
  template void gemm<T>(Transpose, Transpose, int64_t, int64_t, int64_t, acc_t<T>, const T*,      \
                        int64_t, const T*, int64_t, acc_t<T>, T*, int64_t, const GemmEpilogue<T>&); \
  template void gemm_batched<T>(int64_t, Transpose, Transpose, int64_t, int64_t, int64_t,         \
                                acc_t<T>, const T*, int64_t, int64_t, const T*, int64_t, int64_t, \
                                acc_t<T>, T*, int64_t, int64_t, const GemmEpilogue<T>&);
DTR_FOR_EACH_FLOATING(DTR_INSTANTIATE_GEMM)

}  // namespace dtr::kernels::cpu::DTR_CPU_LEVEL
