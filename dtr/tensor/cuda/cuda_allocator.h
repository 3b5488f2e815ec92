// The CUDA caching allocator: device memory is taken from the driver once and
// reused, so steady-state training (FSDP's all-gather buffers freed and
// re-allocated every step) makes no cudaMalloc/cudaFree calls and no device-wide
// synchronisation.
//
// - Size classes: a request is rounded up to a multiple of 512 bytes below 1 MiB,
//   and above that to one of four steps between consecutive powers of two (at
//   most 25% waste). A free block is reused only for a request of its own class.
// - Streams: a block belongs to the stream that was current when it was
//   allocated, and a freed block goes back to that stream's pool; work on that
//   stream is ordered, so reuse there is safe without waiting. If the memory was
//   also used on other streams (record_stream), freeing records an event on each
//   of them, and the block becomes reusable only once all those events complete.
// - empty_cache() returns unused blocks to the driver; an allocation that fails
//   does that and retries once before reporting out-of-memory.
// Statistics: the same tagged counters as the CPU allocator (bytes requested),
// plus reserved_bytes (everything taken from the driver).
//
// DTR_CUDA_NO_CACHING=1 in the environment turns the caching off, for debugging:
// every allocation is a cudaMalloc of exactly its size, and every free waits for
// the device and calls cudaFree. compute-sanitizer's memcheck then sees each
// tensor's own bounds, and a use after free touches unmapped memory instead of a
// reused block (PyTorch's PYTORCH_NO_CUDA_MEMORY_CACHING; scripts/device_sanitize.py
// sets it). Slow: every free synchronises the device.
#pragma once

#include "dtr/tensor/allocator.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace dtr::cuda {

class CudaCachingAllocator final : public Allocator {
 public:
  static CudaCachingAllocator& instance();

  void* allocate(size_t nbytes, MemoryTag tag, int device) override;
  void deallocate(void* ptr, size_t nbytes, MemoryTag tag) override;

  // Declares that the block holding `ptr` is used by work on `stream` too.
  void record_stream(void* ptr, cudaStream_t stream);
  void empty_cache();

  static size_t round_size(size_t nbytes);
  // False under DTR_CUDA_NO_CACHING=1 (read once, when the allocator is first used).
  bool caching_enabled() const { return caching_; }

 private:
  CudaCachingAllocator();

  struct Block {
    void* ptr = nullptr;
    size_t size = 0;  // as taken from the driver: rounded to its class when caching
    int device = 0;
    cudaStream_t stream = nullptr;
    std::vector<cudaStream_t> other_streams;
  };
  struct PendingBlock {
    Block block;
    std::vector<cudaEvent_t> events;
  };
  using PoolKey = std::pair<int, cudaStream_t>;

  void collect_completed_locked();
  void release_free_blocks_locked(int device);  // -1: all devices
  void* malloc_locked(size_t size, int device);

  void free_uncached_locked(const Block& block);

  const bool caching_;
  std::mutex mutex_;
  std::unordered_map<void*, Block> live_;
  std::map<PoolKey, std::multimap<size_t, Block>> free_;
  std::vector<PendingBlock> pending_;
  int64_t reserved_ = 0;
};

}  // namespace dtr::cuda
