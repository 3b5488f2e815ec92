// Matrix multiply on the CPU (GEMM): f32 (and the half types, through f32) on dtr's
// packed kernels, f64 on Eigen maps over raw pointers.
//
// Row-major semantics, like cblas with CblasRowMajor:
//   C[m, n] = alpha * op(A)[m, k] . op(B)[k, n] + beta * C
// op(X) is X as stored (Transpose::no) or its transpose (Transpose::yes). lda, ldb
// and ldc are the row strides (in elements) of the matrices as stored: A is stored
// [m, k] for Transpose::no and [k, m] for Transpose::yes, so lda >= k or lda >= m
// respectively; likewise B is stored [k, n] or [n, k]; ldc >= n. Columns are unit-stride.
//
// float and double compute natively. bf16 and f16 compute with f32 accumulation:
// blocks are converted to float, multiplied in f32 and rounded once on store;
// alpha and beta are then floats (acc_t<T>).
//
// As in BLAS, beta == 0 writes C without reading it (NaN or garbage in C is ignored),
// and alpha == 0 or k == 0 reads neither A nor B. C must not overlap A or B.
//
// An epilogue (dtr/kernels/gemm_epilogue.h) adds a bias row and applies an activation on
// the way out; for bf16 and f16 before C is rounded, for float and double after the
// product (the same arithmetic: their product is already in the element type).
//
// Threads: large problems use kernels::parallel_for, split across the batch when it
// has at least num_threads() matrices, otherwise across rows (or columns) of each C.
// The split points are fixed multiples chosen so that every element of C is summed
// in the same order whatever the thread count: results are bitwise identical for
// any num_threads().
#pragma once

#include "dtr/kernels/cpu/cpu_level.h"
#include "dtr/kernels/gemm_epilogue.h"
#include "dtr/kernels/scalar_types.h"
#include "dtr/kernels/transpose.h"

#include <cstdint>

namespace dtr::kernels::cpu {

using kernels::Transpose;

// One GEMM: C = alpha * op(A) . op(B) + beta * C.
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void gemm(Transpose trans_a, Transpose trans_b, int64_t m, int64_t n,
                                 int64_t k, acc_t<T> alpha, const T* a, int64_t lda, const T* b,
                                 int64_t ldb, acc_t<T> beta, T* c, int64_t ldc,
                                 const GemmEpilogue<T>& epilogue);)
template <class T>
void gemm(Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k, acc_t<T> alpha,
          const T* a, int64_t lda, const T* b, int64_t ldb, acc_t<T> beta, T* c, int64_t ldc,
          const GemmEpilogue<T>& epilogue = {}) {
  return DTR_CPU_DISPATCH(gemm<T>)(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                                   epilogue);
}

// `batch` independent GEMMs of one shape; matrix i of an operand starts at
// pointer + i * its batch stride (in elements). A batch stride of 0 broadcasts one
// matrix to every batch entry (allowed for A and B; C's batch entries must not overlap).
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void gemm_batched(int64_t batch, Transpose trans_a, Transpose trans_b,
                                         int64_t m, int64_t n, int64_t k, acc_t<T> alpha,
                                         const T* a, int64_t lda, int64_t batch_stride_a,
                                         const T* b, int64_t ldb, int64_t batch_stride_b,
                                         acc_t<T> beta, T* c, int64_t ldc, int64_t batch_stride_c,
                                         const GemmEpilogue<T>& epilogue);)
template <class T>
void gemm_batched(int64_t batch, Transpose trans_a, Transpose trans_b, int64_t m, int64_t n,
                  int64_t k, acc_t<T> alpha, const T* a, int64_t lda, int64_t batch_stride_a,
                  const T* b, int64_t ldb, int64_t batch_stride_b, acc_t<T> beta, T* c, int64_t ldc,
                  int64_t batch_stride_c, const GemmEpilogue<T>& epilogue = {}) {
  return DTR_CPU_DISPATCH(gemm_batched<T>)(batch, trans_a, trans_b, m, n, k, alpha, a, lda,
                                           batch_stride_a, b, ldb, batch_stride_b, beta, c, ldc,
                                           batch_stride_c, epilogue);
}

}  // namespace dtr::kernels::cpu
