// Rotary position embedding (RoPE) on a CUDA device: the kernel behind
// dtr/tensor/ops/rope.h on cuda tensors, with the CPU op's semantics.
//
// in and out are contiguous [batch, seq, heads, dim] device buffers (dim even;
// out may equal in). The pair (x[2i], x[2i + 1]) of every row (b, t, h) is rotated
// by sign * a(t, i), a(t, i) = (offset + t) * theta^(-2i / dim):
//   y[2i]     = x[2i] cos - x[2i + 1] sin
//   y[2i + 1] = x[2i] sin + x[2i + 1] cos
// sign is +1 for the forward and -1 for the backward (the inverse rotation).
//
// Two kernels: the first fills a [seq, dim / 2] table of cos and sin in acc_t<T>
// (float; double for f64): each angle is the CPU op's double, bit for bit
// (sign * (offset + t) * pow(theta, -2i / dim), the pow computed on the host with
// std::pow and passed to the kernel), and its cos and sin are computed in double
// on the device and rounded to acc_t<T>. The second rotates one pair per thread
// with separately rounded products and sums (no fused multiply-add), rounding once
// to T. So results equal the CPU op's bit for bit wherever the table entries do:
// CUDA's double cos and sin are within 2 ulp of glibc's, which after rounding to
// float almost never shows (f64 results may differ in the last bits).
//
// Launchers enqueue on `stream` and never synchronize. Floating T only.
#pragma once

#include "dtr/kernels/scalar_types.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace dtr::kernels::cuda {

// Elements of acc_t<T> the `table` argument of rope_rotate must hold: 2 * seq * (dim / 2).
int64_t rope_table_elements(int64_t seq, int64_t dim);

// table: device scratch of rope_table_elements(seq, dim) elements, in use until
// the kernels complete.
template <class T>
void rope_rotate(const T* in, T* out, int64_t batch, int64_t seq, int64_t heads, int64_t dim,
                 double theta, int64_t offset, double sign, acc_t<T>* table, cudaStream_t stream);

}  // namespace dtr::kernels::cuda
