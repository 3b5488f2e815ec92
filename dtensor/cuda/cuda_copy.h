// Copies, fills and arange for tensors on CUDA devices, used by Tensor::copy_,
// fill_ and the factories. Host<->device copies go through a contiguous staging
// tensor when the destination is strided or of another dtype.
//
// Host -> device from pinned memory (Tensor::pin_memory) of a contiguous source
// is asynchronous, as torch's non_blocking copy: queued on the destination
// device's current stream, the call returns at once (work later on that stream
// sees the values). The host must not write the source until the stream gets
// there; freeing it is safe (the pinned allocator waits before reusing it).
// Every other host <-> device copy waits for the transfer before returning: a
// pageable source may be reused at once, and copy_ to the host is read right away.
// copy_to_host_async is the explicit non-waiting copy to the host.
#pragma once

#include "dtensor/tensor.h"

namespace dtr::cuda {

// dst = src, with src already expanded to dst's shape; at least one is on a GPU.
void copy_tensor(const Tensor& dst, const Tensor& src);
// dst = src without waiting: dst in pinned host memory and contiguous, src on a
// GPU with dst's dtype and shape. Queued on the current stream of src's device;
// dst holds the values once that stream has passed this point (synchronize it,
// or the device). Throws a clear error for any other pair of tensors.
void copy_to_host_async(const Tensor& dst, const Tensor& src);
void fill_tensor(const Tensor& dst, Scalar value);
void arange_tensor(const Tensor& out, double start, double step);

}  // namespace dtr::cuda
