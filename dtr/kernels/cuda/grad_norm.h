// Gradient-norm kernels on a CUDA device, for dtr/nn/optim/clip_grad.h: the sum of
// |g|^p over many tensors (max |g| for p = inf), the clip coefficient, and the
// scaling of many tensors by it, without a host round trip between them.
//
// Semantics (as clip_grad.h's CPU path): every element is widened to double,
// then p = 2 adds g * g, p = 1 adds |g|, p = inf takes max |g| (NaN if any
// element is NaN), other p add pow(|g|, p). The empty sum is 0.
//
// Determinism: a fixed reduction tree that depends only on the tensors' sizes.
// norm_pow_partials() cuts each tensor into chunks of kNormChunk elements, one
// 256-thread block per chunk; thread t accumulates the 16-byte vectors t, t + 256,
// ... of its chunk (in one double, element order within a vector), then warp
// shuffles and one shared-memory step fold the threads (block_reduce.cuh); the
// chunk's value goes to partials[offset of the chunk]. Alignment changes only how
// a vector is loaded, never which thread adds it. norm_pow_fold() folds the
// partials with one block in the same way. Results are bitwise reproducible run
// to run; against the CPU's pairwise sums they agree to double rounding
// (relative ~1e-15 * log2(n), far below the f32 inputs' own precision).
//
// All launchers enqueue on `stream` and never synchronize.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace dtr::kernels::cuda {

// Elements per block of norm_pow_partials (one partial each).
inline constexpr int64_t kNormChunk = 16384;

// The number of partials norm_pow_partials writes for a tensor of `numel` elements.
inline int64_t norm_pow_partial_count(int64_t numel) { return (numel + kNormChunk - 1) / kNormChunk; }

template <class T>
struct NormTensor {
  const T* data = nullptr;  // `numel` contiguous elements in device memory
  int64_t numel = 0;
};

// Writes the partial sums (maxima for inf) of every chunk of tensors[0, count) to
// partials[0, sum of norm_pow_partial_count(numel)), tensor after tensor, chunk after
// chunk. norm_type > 0 or inf. One launch per batch of tensors (multi_tensor.cuh).
// Instantiated for float, double, bf16, f16.
template <class T>
void norm_pow_partials(const NormTensor<T>* tensors, size_t count, double norm_type, double* partials,
                       cudaStream_t stream);

// *out = the sum (max for inf) of partials[0, n), combined with the old *out first
// when `accumulate` (sum, or NaN-propagating max). One block.
void norm_pow_fold(const double* partials, int64_t n, double norm_type, bool accumulate, double* out,
                   cudaStream_t stream);

// From the total *pow_sum: *norm = pow_sum^(1/p) (sqrt for p = 2, pow_sum itself for
// p = 1 and inf) and *coef = max_norm / (norm + 1e-6) when norm is finite and above
// max_norm, else exactly 1. One thread.
void clip_coefficient(const double* pow_sum, double norm_type, double max_norm, double* norm, double* coef,
                      cudaStream_t stream);

template <class T>
struct ScaleTensor {
  T* data = nullptr;  // `numel` contiguous elements in device memory
  int64_t numel = 0;
};

// data *= coef for every tensor, coef read from device memory at `coef_device` when it
// is not null (else `coef_value`); coef == 1 leaves the memory untouched. Like the CPU's
// mul_(g, coef): coef is first rounded to T, the product is taken in acc_t<T> and
// rounded once to T. Instantiated for float, double, bf16, f16.
template <class T>
void scale(const ScaleTensor<T>* tensors, size_t count, const double* coef_device, double coef_value,
           cudaStream_t stream);

}  // namespace dtr::kernels::cuda
