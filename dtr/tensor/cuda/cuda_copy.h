// Copies, fills and arange for tensors on CUDA devices, used by Tensor::copy_,
// fill_ and the factories. Host<->device copies go through a contiguous staging
// tensor when the destination is strided or of another dtype.
//
// Every host <-> device copy_ waits for the transfer before returning (as torch
// without non_blocking): the source may be overwritten and the destination read
// at once. A contiguous pinned source (Tensor::pin_memory) is copied by DMA
// straight from its pages. copy_to_device_async and copy_to_host_async are the
// explicit non-waiting copies between pinned host memory and a GPU (FSDP's CPU
// offload uses them and synchronizes at the end of backward).
#pragma once

#include "dtr/tensor/tensor.h"

namespace dtr::cuda {

// dst = src, with src already expanded to dst's shape; at least one is on a GPU.
void copy_tensor(const Tensor& dst, const Tensor& src);
// dst = src without waiting: src in pinned host memory and contiguous, dst on a GPU
// with src's shape (any dtype and layout: converted on the device). Queued on the
// current stream of dst's device; later work on that stream sees the values. The
// host must not write src until the stream has passed this point; freeing src is
// safe (the pinned allocator waits for the stream before reusing its block).
void copy_to_device_async(const Tensor& dst, const Tensor& src);
// dst = src without waiting: dst in pinned host memory and contiguous, src on a
// GPU with dst's dtype and shape. Queued on the current stream of src's device;
// dst holds the values once that stream has passed this point (synchronize it,
// or the device). Throws a clear error for any other pair of tensors.
void copy_to_host_async(const Tensor& dst, const Tensor& src);
void fill_tensor(const Tensor& dst, Scalar value);
void arange_tensor(const Tensor& out, double start, double step);

}  // namespace dtr::cuda
