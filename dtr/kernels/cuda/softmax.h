// Fused row-wise softmax and log-softmax on a CUDA device over a contiguous
// [rows, cols] device buffer (the CUDA twins of dtr/kernels/cpu/softmax.h, with the
// same semantics): computed max-subtracted in acc_t<T> (float for f32, bf16 and
// f16; double for f64) and rounded once to T on store. Probabilities whose
// exp(x - max) is subnormal are flushed to 0, so -inf entries (masks) give
// exactly 0; a row holding NaN, or only -inf, gives NaN.
//
// Strategy, chosen from cols:
//   - rows of up to 16 vectors (64 f32 / 128 bf16 elements): a row per 4, 8 or 16
//     lanes of a warp, one vector each, so short rows keep every lane loading;
//   - rows of up to 4 vectors per lane (512 f32 / 1024 bf16 elements): one warp
//     per row, the row held in registers (one read, one write);
//   - rows of up to 32 elements per thread of a 1024-thread block (32768 f32,
//     bf16 or f16 elements, 16384 f64): one block per row, held in registers;
//   - longer rows: one block per row. When the row fits in shared memory (up to
//     110 KiB, e.g. 56320 bf16 elements) a max pass copies it there, then a sum
//     pass and the write pass read it from there; else an online max/sum pass, and
//     the write pass reads the row again.
// 16-bit rows take exp(x - max) from the hardware's fast exp2 (__expf, relative
// error ~1e-6, far below their rounding); f32 and f64 use the accurate expf / exp.
// Reductions use a fixed tree (warp shuffles, then one shared-memory step), so
// results are bitwise reproducible. Launchers enqueue on `stream` and return
// without synchronizing. Floating T only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dtr::kernels::cuda {

// out[r, j] = exp(in[r, j] - max_r) / sum_k exp(in[r, k] - max_r).
template <class T>
void softmax_rows(const T* in, int64_t rows, int64_t cols, T* out, cudaStream_t stream);

// out[r, j] = (in[r, j] - max_r) - log(sum_k exp(in[r, k] - max_r)).
template <class T>
void log_softmax_rows(const T* in, int64_t rows, int64_t cols, T* out, cudaStream_t stream);

}  // namespace dtr::kernels::cuda
