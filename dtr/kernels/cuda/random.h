// Random fills on a CUDA device: the twins of dtr/kernels/cpu/random.h (uniform_,
// normal_ and trunc_normal_ of dtr/tensor/random.h on cuda tensors), with the same
// arguments plus the stream to launch on, last.
//
// The destination is a strided box of a logical row-major tensor (LogicalBox, as
// on the CPU; its host arrays are read during the call only), and every element
// gets the value dtr/kernels/philox.h assigns to its logical linear index, so a
// shard filled on the device equals the same box of a whole-tensor fill on the
// CPU. One thread per destination element computes its own Philox block.
//
// Numerics, against the CPU kernels:
//   - uniform: bit for bit the CPU's values for every dtype (the same integer
//     words, lo + (hi - lo) * u with the product and the sum rounded separately,
//     the same rounding to T and the same clamp below hi);
//   - normal: the same Box-Muller words and formula, but CUDA's logf, sqrtf,
//     cosf and sinf (log, cos, sin for f64) may differ from glibc's by an ulp or
//     two, so f32 / f64 values agree to a few ulp (bf16 / f16 within one ulp);
//   - trunc_normal: the CPU's bounds and probabilities (computed on the host, as
//     there), but CUDA's normcdfinv for the inverse CDF where the CPU uses Eigen's
//     ndtri: agreement to about 1e-14 relative in double before rounding to T.
// Preconditions are the CPU kernels' (the caller checks them). Floating T only.
#pragma once

#include "dtr/kernels/cpu/random.h"
#include "dtr/kernels/philox.h"

#include <cuda_runtime.h>

namespace dtr::kernels::cuda {

using LogicalBox = cpu::LogicalBox;

template <class T>
void uniform(T* dst, const LogicalBox& box, PhiloxStream stream, double lo, double hi,
             cudaStream_t cuda_stream);

template <class T>
void normal(T* dst, const LogicalBox& box, PhiloxStream stream, double mean, double std,
            cudaStream_t cuda_stream);

template <class T>
void trunc_normal(T* dst, const LogicalBox& box, PhiloxStream stream, double mean, double std,
                  double a, double b, cudaStream_t cuda_stream);

}  // namespace dtr::kernels::cuda
