// Many copies in one launch on a CUDA device, with an optional element-type
// conversion: FSDP's copy-in (every parameter's shard into the flat all-gather
// input, cast to the compute dtype, padding zeroed), copy-out (each parameter's
// rows out of the gathered buffer) and the reduce-scatter input, each one launch
// instead of one copy_ per parameter (dtr/fsdp/copy_batch.h is the Tensor-level entry).
//
// Item k copies a [rows, cols] block: for r < rows, c < cols,
//   dst[r * dst_row_stride + c] = convert<To>(src[r * src_row_stride + c])
// (strides in elements; contiguous data is rows = 1), or To(0) (all-zero bits)
// when src is null. Conversions round exactly as Tensor::copy_ does
// (scalar_types.h convert), so results equal the CPU's copy_ bit for bit. Items
// must not overlap one another's destinations, nor any source.
//
// Launch: one launch per call (dtr/kernels/cuda/multi_tensor.cuh: the item table is
// the kernel parameter; more items than a batch holds, several hundred, take one
// launch per batch), one 256-thread block per 8192-element piece of a row. A row
// whose source and destination starts are both aligned for it moves in vectors of
// 16 bytes of the wider type (e.g. 4 f32 in, 4 bf16 out); other rows element by
// element (coalesced all the same). Same-dtype copies move raw bits (any dtype).
// Enqueues on `stream`; never synchronizes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace dtr::kernels::cuda {

struct MultiCopyItem {
  const void* src = nullptr;  // null: fill dst with zeros
  void* dst = nullptr;
  int64_t rows = 1;
  int64_t cols = 0;
  int64_t src_row_stride = 0;  // elements between row starts (unused when rows == 1)
  int64_t dst_row_stride = 0;
};

// Elements of a row per block.
inline constexpr int64_t kMultiCopyChunk = 8192;

// Instantiated for From == To for every dtype (float, double, bf16, f16, int32_t,
// int64_t, uint8_t) and for every pair of distinct floating types.
template <class From, class To>
void multi_copy(const MultiCopyItem* items, size_t count, cudaStream_t stream);

}  // namespace dtr::kernels::cuda
