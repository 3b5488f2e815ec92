// Matrix multiply on a CUDA device (GEMM): the CUDA twin of dtr/kernels/cpu/gemm.h,
// handwritten (no cuBLAS), every launcher on an explicit stream.
//
// Row-major semantics, like cblas with CblasRowMajor:
//   C[b] = alpha * op(A[b])[m, k] . op(B[b])[k, n] + beta * C[b],   b in [0, batch)
// op(X) is X as stored (Transpose::no) or its transpose (Transpose::yes). lda, ldb
// and ldc are the row strides (in elements) of the matrices as stored: A is stored
// [m, k] for Transpose::no and [k, m] for Transpose::yes (lda >= k or lda >= m);
// B is stored [k, n] or [n, k] (ldb >= n or ldb >= k); ldc >= n. Columns are unit-stride.
// Matrix b of an operand starts at pointer + b * its batch stride (in elements); a
// batch stride of 0 broadcasts one A or B to every batch entry. C's entries must not
// overlap each other, A or B.
//
// Precision: products accumulate in f32 and round once on store.
//  - float: CUDA-core FMAs (SIMT tiles), plain f32, no TF32.
//  - bf16, f16: tensor cores (mma.sync m16n8k16, f32 accumulate). The fast path
//    (cp.async multi-stage pipeline, ldmatrix, 128x128x64 tiles) runs when the pointers,
//    leading dims and batch strides of A and B are 16-byte aligned and the unit-stride
//    extent of each stored A and B is a multiple of 8; any other shape or alignment
//    takes a guarded path with the same arithmetic.
//  - bf16, f16 on a compute capability 9.0 GPU (H100, H200), in a build whose
//    CMAKE_CUDA_ARCHITECTURES includes 90: the wgmma path (gemm_sm90.cu: wgmma.mma_async
//    fed by bulk tensor copies, f32 accumulate) takes every GEMM, A and B either way,
//    whose A and B pointers, leading dims and batch strides are 16-byte aligned, k > 0
//    and alpha != 0; everything else runs on the mma.sync kernels above.
// As in BLAS, beta == 0 writes C without reading it (NaN or garbage in C is ignored),
// and alpha == 0 or k == 0 reads neither A nor B.
//
// An epilogue (dtr/kernels/gemm_epilogue.h) adds a bias row and applies an activation to
// the f32 result before C is rounded (float: to the f32 result), in every kernel. The
// wgmma path stores C through bulk tensor copies also with a bias and an activation;
// when pre is wanted it stores both from registers. bias and pre need no alignment
// beyond their element's (pre's 4-byte pair stores follow C's).
#pragma once

#include "dtr/kernels/gemm_epilogue.h"
#include "dtr/kernels/scalar_types.h"
#include "dtr/kernels/transpose.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace dtr::kernels::cuda {

// Which kernel family ran the most recent gemm / gemm_batched call of this thread
// (none before the first, or when that call had nothing to compute). For tests and
// benchmarks.
enum class GemmPath { none, simt, mma_sync, mma_sync_guarded, wgmma };
GemmPath gemm_last_path();

// Whether bf16/f16 GEMMs on the current device may take the wgmma path: built for sm_90a,
// a device of compute capability 9.0, and not switched off by gemm_enable_wgmma(false).
bool gemm_wgmma_available();

// Allows (the default) or forbids the wgmma path for the whole process and returns the
// setting it replaces; benchmarks and tests switch it off to run the mma.sync kernels on
// a Hopper GPU.
bool gemm_enable_wgmma(bool enable);

// One GEMM: C = epilogue(alpha * op(A) . op(B) + beta * C).
template <class T>
void gemm(Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const T* a, int64_t lda, const T* b, int64_t ldb, float beta, T* c, int64_t ldc,
          cudaStream_t stream, const GemmEpilogue<T>& epilogue = {});

// `batch` independent GEMMs of one shape (see the batch strides above).
template <class T>
void gemm_batched(int64_t batch, Transpose trans_a, Transpose trans_b, int64_t m, int64_t n,
                  int64_t k, float alpha, const T* a, int64_t lda, int64_t batch_stride_a,
                  const T* b, int64_t ldb, int64_t batch_stride_b, float beta, T* c,
                  int64_t ldc, int64_t batch_stride_c, cudaStream_t stream,
                  const GemmEpilogue<T>& epilogue = {});

}  // namespace dtr::kernels::cuda
