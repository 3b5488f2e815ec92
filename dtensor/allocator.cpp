#include "dtensor/allocator.h"

#include "dtensor/error.h"

#ifdef DTR_WITH_CUDA
#include "dtensor/cuda/cuda_runtime.h"
#endif

#include <cstdlib>
#include <new>

namespace dtr {

void* CpuAllocator::allocate(size_t nbytes, MemoryTag tag, int /*index*/) {
  if (nbytes == 0) return nullptr;
  // aligned_alloc wants a size that is a multiple of the alignment.
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  void* ptr = std::aligned_alloc(kAlignment, rounded);
  DTR_CHECK(ptr != nullptr, "out of CPU memory: failed to allocate {} bytes (tag {})", nbytes,
            memory_tag_name(tag));
  tracker_.on_allocate(static_cast<int64_t>(nbytes), tag);
  return ptr;
}

void CpuAllocator::deallocate(void* ptr, size_t nbytes, MemoryTag tag) {
  if (ptr == nullptr) return;
  std::free(ptr);
  tracker_.on_free(static_cast<int64_t>(nbytes), tag);
}

namespace {

Allocator*& slot(DeviceType type) {
  static CpuAllocator cpu;
  static Allocator* slots[3] = {&cpu, nullptr, nullptr};
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

MemoryStats memory_stats(Device device) {
  if (device.is_meta()) return {};
  return get_allocator(device).stats();
}

void reset_peak_memory_stats(Device device) {
  if (!device.is_meta()) get_allocator(device).reset_peak();
}

}  // namespace dtr
