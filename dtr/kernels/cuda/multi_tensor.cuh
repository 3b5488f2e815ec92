// Multi-tensor launches (the machinery of adamw.cu, grad_norm.cu, multi_copy.cu):
// the work of many tensors in one kernel launch, described by a table passed as
// the kernel's parameter, like PyTorch's multi_tensor_apply. The table travels
// with the launch itself: no device buffer, no host-to-device copy, nothing to
// keep alive after the launch returns.
//
// Each item (a tensor, or one row of a copy) is cut into chunks of a fixed number
// of elements, the last one shorter; the launch has one block per chunk of every
// item in the batch, item by item. Block b finds its item by a binary search over
// the batch's running chunk counts (the same search in every thread of the block,
// so the parameter reads broadcast) and works on that chunk alone.
//
// A batch holds up to MultiTensorBatch<Item>::kCapacity items, sized so the whole
// parameter stays under kMultiTensorParamBytes (kernel parameters may take up to
// 32764 bytes since CUDA 12.1 on Volta and newer GPUs): several hundred tensors,
// so an optimizer step is normally one launch; a call with more items makes one
// launch per batch, in order, on the same stream.
//
// Also: Pack<T, N>, N elements loaded or stored with one aligned vector access.
#pragma once

#include "dtr/kernels/cuda/cuda_check.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>

namespace dtr::kernels::cuda {

inline constexpr size_t kMultiTensorParamBytes = 30 * 1024;
// Blocks per launch at most (the x dimension of a grid).
inline constexpr int64_t kMaxBlocksPerLaunch = std::numeric_limits<int32_t>::max();

template <class Item>
struct MultiTensorBatch {
  static_assert(std::is_trivially_copyable_v<Item>, "batch items are copied as kernel parameters");
  static constexpr int kCapacity =
      static_cast<int>((kMultiTensorParamBytes - 64) / (sizeof(Item) + sizeof(int64_t)));
  Item items[kCapacity];
  int64_t chunk_end[kCapacity];  // chunks of items [0, k] together
  int count;
};

// The item that chunk `chunk` (a block index) belongs to, and that item's first chunk.
template <class Item>
__device__ inline int batch_item_of(const MultiTensorBatch<Item>& batch, int64_t chunk,
                                    int64_t* first_chunk) {
  int lo = 0, hi = batch.count - 1;  // the first k with chunk < chunk_end[k]
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (chunk < batch.chunk_end[mid]) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  *first_chunk = lo == 0 ? 0 : batch.chunk_end[lo - 1];
  return lo;
}

// Groups items[0, count) into batches (items with no chunks are left out) and calls
// launch(batch, chunks) for each, in order; chunks_of(item) is an item's chunk count.
template <class Item, class ChunksOf, class Launch>
void for_each_batch(const Item* items, size_t count, const ChunksOf& chunks_of, const Launch& launch) {
  using Batch = MultiTensorBatch<Item>;
  static_assert(sizeof(Batch) <= kMultiTensorParamBytes, "the table must fit the kernel parameter space");
  auto batch = std::make_unique<Batch>();  // ~30 KiB: on the heap, not the stack
  batch->count = 0;
  int64_t chunks = 0;
  for (size_t i = 0; i < count; ++i) {
    const int64_t c = chunks_of(items[i]);
    DTR_CUDA_KERNEL_CHECK(c >= 0 && c <= kMaxBlocksPerLaunch,
                          "multi-tensor launch: item " + std::to_string(i) + " has " +
                              std::to_string(c) + " chunks (at most 2^31 - 1 per launch)");
    if (c == 0) continue;
    if (batch->count == Batch::kCapacity || chunks + c > kMaxBlocksPerLaunch) {
      launch(*batch, chunks);
      batch->count = 0;
      chunks = 0;
    }
    batch->items[batch->count] = items[i];
    chunks += c;
    batch->chunk_end[batch->count] = chunks;
    ++batch->count;
  }
  if (batch->count > 0) launch(*batch, chunks);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

__host__ __device__ inline bool is_aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// N elements of T accessed as one vector (N * sizeof(T) is 2, 4, 8 or 16 bytes).
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// Loads / stores the N elements at p, which must be aligned to N * sizeof(T) bytes.
// Plain (coherent) accesses, so in-place kernels may use them on memory they write.
template <class T, int N>
__device__ inline Pack<T, N> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, N>*>(p);
}

template <class T, int N>
__device__ inline void store_pack(T* p, const Pack<T, N>& pack) {
  *reinterpret_cast<Pack<T, N>*>(p) = pack;
}

}  // namespace dtr::kernels::cuda
