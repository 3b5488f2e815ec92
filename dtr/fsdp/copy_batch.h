// copy_batch: many tensor copies as one operation, for FSDP's flat-buffer copies
// (the all-gather copy-in and copy-out, the reduce-scatter input and the copy of
// the reduced shards into gradients): one kernel launch on CUDA instead of one
// copy_ per parameter (per rank).
//
// Each job is dst = src converted to dst's dtype, or dst = 0 when src is
// undefined: the same values, checks and version bump as dst.copy_(src) /
// dst.zero_(). Destinations must not overlap each other or any source.
//
// On CUDA, the jobs whose two tensors share one device and one shape and
// collapse to a [rows, cols] block with unit column strides (contiguous tensors,
// narrows and row-strided views of them, like a parameter's rows inside a flat
// buffer gathered from k ranks), with the same dtype or two floating dtypes, run as
// one kernels::cuda::multi_copy launch per (device, src dtype, dst dtype) on the
// device's current stream. Every other job (CPU tensors, broadcasting, other
// layouts, integer casts, a source in the destination's storage) runs through
// copy_ / zero_, so on the CPU copy_batch is exactly the loop of copy_ it replaces
// -- except that a contiguous source in pinned host memory (an offloaded shard) is
// copied to a GPU without waiting (cuda::copy_to_device_async): FSDP synchronizes
// before the host writes the shards again (end of backward, reshard_all).
#pragma once

#include "dtr/tensor/tensor.h"

#include <vector>

namespace dtr::fsdp {

struct CopyJob {
  Tensor dst;
  Tensor src;  // undefined: dst is zero-filled
};

void copy_batch(const std::vector<CopyJob>& jobs);

}  // namespace dtr::fsdp
