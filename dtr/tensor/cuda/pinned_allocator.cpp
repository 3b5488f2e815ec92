#include "dtr/tensor/cuda/pinned_allocator.h"

#include "dtr/base/error.h"
#include "dtr/base/log.h"
#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/tensor/cuda/cuda_runtime.h"

#include <algorithm>

namespace dtr::cuda {

PinnedHostAllocator& PinnedHostAllocator::instance() {
  // Never destroyed: at exit the driver may already be gone, and it reclaims memory anyway.
  static auto* allocator = new PinnedHostAllocator();
  return *allocator;
}

PinnedHostAllocator::PinnedHostAllocator() : Allocator(get_allocator(Device::cpu())) {}

void* PinnedHostAllocator::allocate(size_t nbytes, MemoryTag tag, int /*index*/) {
  if (nbytes == 0) return nullptr;
  const size_t size = round_size(nbytes);
  std::lock_guard lock(mutex_);
  collect_completed_locked();
  void* ptr = nullptr;
  if (auto hit = free_.find(size); hit != free_.end()) {
    ptr = hit->second;
    free_.erase(hit);
  } else {
    cudaError_t status = cudaHostAlloc(&ptr, size, cudaHostAllocDefault);
    if (status == cudaErrorMemoryAllocation && !free_.empty()) {  // give the cache back and try once more
      cudaGetLastError();
      release_free_blocks_locked();
      status = cudaHostAlloc(&ptr, size, cudaHostAllocDefault);
    }
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      DTR_FAIL("out of pinned host memory: failed to allocate {} bytes (tag {}); dtr holds {} bytes of pinned memory",
               size, memory_tag_name(tag), reserved_);
    }
    DTR_CUDA_CHECK(status);
    reserved_ += static_cast<int64_t>(size);
    tracker_.add_reserved(static_cast<int64_t>(size));
  }
  live_[ptr] = Block{.size = size, .streams = {}};
  tracker_.on_allocate(static_cast<int64_t>(nbytes), tag);
  return ptr;
}

void PinnedHostAllocator::deallocate(void* ptr, size_t nbytes, MemoryTag tag) {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  DTR_INTERNAL_ASSERT(it != live_.end(), "freeing a pointer the pinned host allocator does not own");
  Block block = std::move(it->second);
  live_.erase(it);
  tracker_.on_free(static_cast<int64_t>(nbytes), tag);
  // Reusable only once the copies queued so far on the current stream and on the
  // streams that used the block complete. This runs from destructors, so a failure
  // is logged and the block leaked rather than reused while a copy may touch it.
  PendingBlock pending{.ptr = ptr, .size = block.size, .events = {}};
  try {
    const int device = current_device();
    const DeviceStream current{device, current_stream(device)};
    if (std::find(block.streams.begin(), block.streams.end(), current) == block.streams.end()) {
      block.streams.push_back(current);
    }
    for (const auto& [dev, stream] : block.streams) {
      DeviceGuard guard(dev);
      cudaEvent_t event = nullptr;
      DTR_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      pending.events.push_back(event);
      DTR_CUDA_CHECK(cudaEventRecord(event, stream));
    }
  } catch (const std::exception& e) {
    DTR_LOG_ERROR("pinned host allocator: could not record a stream event ({}); block of {} bytes leaked", e.what(),
                  block.size);
    for (cudaEvent_t event : pending.events) cudaEventDestroy(event);
    return;
  }
  pending_.push_back(std::move(pending));
}

void PinnedHostAllocator::record_stream(void* ptr, int device, cudaStream_t stream) {
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  DTR_CHECK(it != live_.end(), "record_stream: {} is not the start of a live pinned allocation", fmt::ptr(ptr));
  std::vector<DeviceStream>& streams = it->second.streams;
  const DeviceStream used{device, stream};
  if (std::find(streams.begin(), streams.end(), used) == streams.end()) streams.push_back(used);
}

void PinnedHostAllocator::collect_completed_locked() {
  auto done = [&](PendingBlock& p) {
    for (cudaEvent_t e : p.events) {
      cudaError_t status = cudaEventQuery(e);
      if (status == cudaErrorNotReady) return false;
      DTR_CUDA_CHECK(status);
    }
    for (cudaEvent_t e : p.events) cudaEventDestroy(e);
    free_.emplace(p.size, p.ptr);
    return true;
  };
  std::erase_if(pending_, done);
}

void PinnedHostAllocator::release_free_blocks_locked() {
  for (auto& [size, ptr] : free_) {
    DTR_CUDA_CHECK(cudaFreeHost(ptr));
    reserved_ -= static_cast<int64_t>(size);
    tracker_.add_reserved(-static_cast<int64_t>(size));
  }
  free_.clear();
}

void PinnedHostAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  collect_completed_locked();
  release_free_blocks_locked();
}

}  // namespace dtr::cuda
