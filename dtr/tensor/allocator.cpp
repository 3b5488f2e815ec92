#include "dtr/tensor/allocator.h"

#include "dtr/base/error.h"

#ifdef DTR_WITH_CUDA
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <new>

namespace dtr {

size_t round_to_size_class(size_t nbytes, size_t small_step) {
  constexpr size_t kLarge = size_t{1} << 20;
  if (nbytes < kLarge) return std::max(small_step, (nbytes + small_step - 1) / small_step * small_step);
  const size_t step = std::bit_floor(nbytes) / 4;
  return (nbytes + step - 1) / step * step;
}

void* CpuAllocator::allocate(size_t nbytes, MemoryTag tag, int /*index*/) {
  if (nbytes == 0) return nullptr;
  // aligned_alloc wants a size that is a multiple of the alignment.
  const size_t size = round_to_size_class(nbytes, kAlignment);
  void* ptr = nullptr;
  if (size >= kCacheMin) {
    std::lock_guard lock(mutex_);
    if (auto hit = cached_.find(size); hit != cached_.end()) {
      ptr = hit->second;
      cached_.erase(hit);
    } else {
      ptr = std::aligned_alloc(kAlignment, size);
      if (ptr == nullptr && !cached_.empty()) {  // give the cache back and try once more
        release_cache_locked();
        ptr = std::aligned_alloc(kAlignment, size);
      }
      if (ptr != nullptr) tracker_.add_reserved(static_cast<int64_t>(size));
    }
  } else {
    ptr = std::aligned_alloc(kAlignment, size);
  }
  DTR_CHECK(ptr != nullptr, "out of CPU memory: failed to allocate {} bytes (tag {})", nbytes,
            memory_tag_name(tag));
  tracker_.on_allocate(static_cast<int64_t>(nbytes), tag);
  return ptr;
}

void CpuAllocator::deallocate(void* ptr, size_t nbytes, MemoryTag tag) {
  if (ptr == nullptr) return;
  tracker_.on_free(static_cast<int64_t>(nbytes), tag);
  const size_t size = round_to_size_class(nbytes, kAlignment);
  if (size < kCacheMin) {
    std::free(ptr);
    return;
  }
  std::lock_guard lock(mutex_);
  cached_.emplace(size, ptr);
}

void CpuAllocator::release_cache_locked() {
  for (auto& [bytes, block] : cached_) {
    std::free(block);
    tracker_.add_reserved(-static_cast<int64_t>(bytes));
  }
  cached_.clear();
}

void CpuAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  release_cache_locked();
}

namespace {

Allocator*& slot(DeviceType type) {
  // Never destroyed: tensors held by static objects may be freed while the process
  // exits, after a destructor of the allocator would have run. Its cache stays
  // reachable until the end.
  static CpuAllocator* const cpu = new CpuAllocator();
  static Allocator* slots[3] = {cpu, nullptr, nullptr};
  return slots[static_cast<size_t>(type)];
}

}  // namespace

Allocator& get_allocator(Device device) {
  DTR_CHECK(!device.is_meta(), "the meta device holds no memory and has no allocator");
#ifdef DTR_WITH_CUDA
  if (device.is_cuda()) cuda::init();
#endif
  Allocator* a = slot(device.type);
  DTR_CHECK(a != nullptr,
            "no allocator for device {}: this build of dtr has no CUDA backend", device);
  return *a;
}

void set_allocator(DeviceType type, Allocator* allocator) { slot(type) = allocator; }

namespace {

Allocator*& pinned_slot() {
  static Allocator* pinned = nullptr;
  return pinned;
}

}  // namespace

Allocator& get_pinned_allocator() {
#ifdef DTR_WITH_CUDA
  DTR_CHECK(cuda::is_available(),
            "pinned host memory needs a GPU: expected at least one CUDA device, found none on this machine");
  cuda::init();
#endif
  Allocator* a = pinned_slot();
  DTR_CHECK(a != nullptr, "pinned host memory needs the CUDA backend, which this build of dtr lacks");
  return *a;
}

void set_pinned_allocator(Allocator* allocator) { pinned_slot() = allocator; }

MemoryStats memory_stats(Device device) {
  if (device.is_meta()) return {};
  return get_allocator(device).stats();
}

void reset_peak_memory_stats(Device device) {
  if (!device.is_meta()) get_allocator(device).reset_peak();
}

}  // namespace dtr
