// Fused dropout on a CUDA device: the kernel behind dtr/tensor/ops/dropout.h on cuda
// tensors. It draws the same mask as the CPU op, which fills a fresh f32 tensor
// with uniform_() and keeps element i where u_i >= p: here u_i is
// kernels::uniform_float(stream, i) (the Philox words of dtr/kernels/philox.h for the
// logical index i of the contiguous x), compared with p rounded to float. Then
//   scale[i] = u_i >= float(p) ? T(1 / (1 - p)) : 0        (T(.) rounds the double once)
//   out[i]   = x[i] * scale[i]                             (in float for bf16/f16, rounded once)
// which are bit for bit the CPU op's saved scale tensor and output, for every
// floating dtype. One thread draws one Philox block and handles its 4 elements.
// Enqueues on `cuda_stream` and never synchronizes. Floating T only; 0 <= p < 1.
#pragma once

#include "dtr/kernels/philox.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace dtr::kernels::cuda {

// x, out, scale: contiguous device buffers of n elements.
template <class T>
void dropout_forward(const T* x, int64_t n, PhiloxStream stream, double p, T* out, T* scale,
                     cudaStream_t cuda_stream);

}  // namespace dtr::kernels::cuda
