#include "dtr/tensor/cuda/cuda_allocator.h"

#include "dtr/base/error.h"
#include "dtr/base/log.h"
#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/tensor/cuda/cuda_runtime.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <string_view>

namespace dtr::cuda {

CudaCachingAllocator& CudaCachingAllocator::instance() {
  // Never destroyed: at exit the driver may already be gone, and it reclaims memory anyway.
  static auto* allocator = new CudaCachingAllocator();
  return *allocator;
}

namespace {

bool caching_turned_off() {
  const char* value = std::getenv("DTR_CUDA_NO_CACHING");
  return value != nullptr && std::string_view(value) != "" && std::string_view(value) != "0";
}

}  // namespace

CudaCachingAllocator::CudaCachingAllocator() : caching_(!caching_turned_off()) {
  if (!caching_) DTR_LOG_WARN("DTR_CUDA_NO_CACHING is set: every CUDA allocation is a cudaMalloc, every free a device sync");
}

size_t CudaCachingAllocator::round_size(size_t nbytes) { return round_to_size_class(nbytes, 512); }

void* CudaCachingAllocator::malloc_locked(size_t size, int device) {
  DeviceGuard guard(device);
  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, size);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free error state of this call
    collect_completed_locked();
    release_free_blocks_locked(device);
    status = cudaMalloc(&ptr, size);
  }
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    MemoryStats s = tracker_.snapshot();
    DTR_FAIL(
        "CUDA out of memory on cuda:{}: tried to allocate {} bytes; dtr holds {} bytes in "
        "tensors and {} reserved; the device has {} of {} bytes free",
        device, size, s.total.current_bytes, reserved_, free_bytes, total_bytes);
  }
  DTR_CUDA_CHECK(status);
  reserved_ += static_cast<int64_t>(size);
  tracker_.add_reserved(static_cast<int64_t>(size));
  return ptr;
}

void* CudaCachingAllocator::allocate(size_t nbytes, MemoryTag tag, int device) {
  if (nbytes == 0) return nullptr;
  DTR_CHECK(device >= 0 && device < device_count(),
            "cannot allocate on cuda:{}: this machine has {} GPU(s)", device, device_count());
  const size_t size = caching_ ? round_size(nbytes) : nbytes;
  cudaStream_t stream = current_stream(device);
  std::lock_guard lock(mutex_);
  collect_completed_locked();
  Block block;
  bool reused = false;
  if (auto pool = free_.find({device, stream}); caching_ && pool != free_.end()) {
    if (auto hit = pool->second.find(size); hit != pool->second.end()) {
      block = std::move(hit->second);
      pool->second.erase(hit);
      reused = true;
    }
  }
  if (!reused) {
    block.ptr = malloc_locked(size, device);
    block.size = size;
    block.device = device;
    block.stream = stream;
  }
  live_[block.ptr] = block;
  tracker_.on_allocate(static_cast<int64_t>(nbytes), tag);
  return block.ptr;
}

void CudaCachingAllocator::deallocate(void* ptr, size_t nbytes, MemoryTag tag) {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  DTR_INTERNAL_ASSERT(it != live_.end(), "freeing a pointer the CUDA allocator does not own");
  Block block = std::move(it->second);
  live_.erase(it);
  tracker_.on_free(static_cast<int64_t>(nbytes), tag);
  if (!caching_) {
    free_uncached_locked(block);
    return;
  }
  if (block.other_streams.empty()) {
    free_[{block.device, block.stream}].emplace(block.size, std::move(block));
    return;
  }
  // Reusable only after the other streams' queued work on this memory completes.
  // This runs from destructors, so failures are logged, and the block is then leaked
  // rather than reused unsafely.
  PendingBlock pending{std::move(block), {}};
  DeviceGuard guard(pending.block.device);
  for (cudaStream_t s : pending.block.other_streams) {
    cudaEvent_t event = nullptr;
    if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventRecord(event, s) != cudaSuccess) {
      DTR_LOG_ERROR("CUDA allocator: could not record a stream event ({}); block of {} bytes leaked",
                    cudaGetErrorString(cudaGetLastError()), pending.block.size);
      return;
    }
    pending.events.push_back(event);
  }
  pending.block.other_streams.clear();
  pending_.push_back(std::move(pending));
}

// Without caching: the device finishes everything queued (on any stream) that may
// still use the block, then the driver takes it back. This runs from destructors, so
// failures are logged (and the block leaked), not thrown.
void CudaCachingAllocator::free_uncached_locked(const Block& block) {
  DeviceGuard guard(block.device);
  const cudaError_t synced = cudaDeviceSynchronize();
  const cudaError_t freed = synced == cudaSuccess ? cudaFree(block.ptr) : synced;
  if (freed != cudaSuccess) {
    DTR_LOG_ERROR("CUDA allocator (no caching): could not free a block of {} bytes on cuda:{} ({}); leaked",
                  block.size, block.device, cudaGetErrorString(freed));
    (void)cudaGetLastError();
    return;
  }
  reserved_ -= static_cast<int64_t>(block.size);
  tracker_.add_reserved(-static_cast<int64_t>(block.size));
}

void CudaCachingAllocator::record_stream(void* ptr, cudaStream_t stream) {
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  DTR_CHECK(it != live_.end(), "record_stream: {} is not the start of a live CUDA allocation", fmt::ptr(ptr));
  Block& b = it->second;
  if (stream == b.stream) return;
  if (std::find(b.other_streams.begin(), b.other_streams.end(), stream) == b.other_streams.end()) {
    b.other_streams.push_back(stream);
  }
}

void CudaCachingAllocator::collect_completed_locked() {
  auto done = [&](PendingBlock& p) {
    for (cudaEvent_t e : p.events) {
      cudaError_t status = cudaEventQuery(e);
      if (status == cudaErrorNotReady) return false;
      DTR_CUDA_CHECK(status);
    }
    for (cudaEvent_t e : p.events) cudaEventDestroy(e);
    free_[{p.block.device, p.block.stream}].emplace(p.block.size, std::move(p.block));
    return true;
  };
  std::erase_if(pending_, done);
}

void CudaCachingAllocator::release_free_blocks_locked(int device) {
  for (auto& [key, pool] : free_) {
    if (device >= 0 && key.first != device) continue;
    DeviceGuard guard(key.first);
    for (auto& [size, block] : pool) {
      DTR_CUDA_CHECK(cudaFree(block.ptr));
      reserved_ -= static_cast<int64_t>(size);
      tracker_.add_reserved(-static_cast<int64_t>(size));
    }
    pool.clear();
  }
}

void CudaCachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  collect_completed_locked();
  release_free_blocks_locked(-1);
}

}  // namespace dtr::cuda
