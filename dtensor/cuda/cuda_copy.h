// Copies, fills and arange for tensors on CUDA devices, used by Tensor::copy_,
// fill_ and the factories. Host<->device copies go through a contiguous staging
// tensor when the destination is strided, and wait for the transfer before
// returning (host memory here is pageable; pinned async copies come with the
// FSDP offload path).
#pragma once

#include "dtensor/tensor.h"

namespace dtr::cuda {

// dst = src, with src already expanded to dst's shape; at least one is on a GPU.
void copy_tensor(const Tensor& dst, const Tensor& src);
void fill_tensor(const Tensor& dst, Scalar value);
void arange_tensor(const Tensor& out, double start, double step);

}  // namespace dtr::cuda
