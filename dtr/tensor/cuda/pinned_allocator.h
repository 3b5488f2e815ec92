// The pinned host allocator: page-locked host memory from cudaHostAlloc, which
// the GPU's copy engines read and write directly, so that copies between it and
// a GPU run asynchronously (Tensor::pin_memory, TensorOptions::pin_memory; FSDP's
// CPU offload keeps shards and gradients in it).
//
// - Caching: cudaHostAlloc / cudaFreeHost are slow (they map pages and
//   synchronise), so freed blocks are kept and reused for a later request of the
//   same size class (round_to_size_class, 512-byte steps below 1 MiB).
// - Asynchronous copies: a block may be freed while a copy queued before the
//   free still reads or writes it. Freeing records an event on the current
//   stream of the current device and on every stream a copy declared with
//   record_stream (dtr/tensor/cuda/cuda_copy.cpp does for its asynchronous copies);
//   the block is handed out again only once cudaEventQuery says all of them
//   completed.
// - Statistics: counted in the CPU allocator's tracker, so memory_stats(
//   Device::cpu()) shows pinned bytes under their tag; reserved_bytes includes
//   every pinned block taken from the driver.
// - empty_cache() frees the cached blocks whose copies completed; a failing
//   cudaHostAlloc does that and retries once.
#pragma once

#include "dtr/tensor/allocator.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dtr::cuda {

class PinnedHostAllocator final : public Allocator {
 public:
  static PinnedHostAllocator& instance();

  void* allocate(size_t nbytes, MemoryTag tag, int index) override;  // index is ignored
  void deallocate(void* ptr, size_t nbytes, MemoryTag tag) override;

  // Declares that work queued on `stream` of `device` reads or writes the pinned
  // block starting at `ptr` (a Storage's data()).
  void record_stream(void* ptr, int device, cudaStream_t stream);
  void empty_cache();

  static size_t round_size(size_t nbytes) { return round_to_size_class(nbytes, 512); }

 private:
  PinnedHostAllocator();

  using DeviceStream = std::pair<int, cudaStream_t>;
  struct Block {
    size_t size = 0;                   // rounded, as taken from the driver
    std::vector<DeviceStream> streams;  // used by asynchronous copies
  };
  struct PendingBlock {
    void* ptr = nullptr;
    size_t size = 0;
    std::vector<cudaEvent_t> events;
  };

  void collect_completed_locked();
  void release_free_blocks_locked();

  std::mutex mutex_;
  std::unordered_map<void*, Block> live_;
  std::multimap<size_t, void*> free_;  // by rounded size
  std::vector<PendingBlock> pending_;  // freed, copies maybe in flight
  int64_t reserved_ = 0;
};

}  // namespace dtr::cuda
