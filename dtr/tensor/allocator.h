// Allocators: one per device type, each counting its bytes by MemoryTag.
//
// The CPU allocator returns 64-byte aligned blocks. Device backends register
// their allocator explicitly with set_allocator() from their init function (no
// static initialisers: dtr is a static library and the linker would drop them).
// The meta device has no allocator: meta storage holds no memory. Statistics are
// kept per allocator, i.e. per device type (dtr runs one GPU per process); the
// pinned host allocator (CUDA backend) counts into the CPU allocator's statistics,
// since pinned memory is host memory.
#pragma once

#include "dtr/tensor/device.h"
#include "dtr/tensor/memory_stats.h"

#include <cstddef>
#include <map>
#include <mutex>

namespace dtr {

class Allocator {
 public:
  Allocator() = default;
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;
  virtual ~Allocator() = default;
  // Returns nbytes of memory (nullptr for 0 bytes) on device `index` of this
  // allocator's type, counted under `tag`.
  virtual void* allocate(size_t nbytes, MemoryTag tag, int index) = 0;
  // Returns memory from allocate(); nbytes and tag must be those it was counted under.
  virtual void deallocate(void* ptr, size_t nbytes, MemoryTag tag) = 0;

  // Moves nbytes of a live allocation from one tag to another (a buffer that changes role).
  void retag(size_t nbytes, MemoryTag from, MemoryTag to) {
    tracker_.on_retag(static_cast<int64_t>(nbytes), from, to);
  }
  MemoryStats stats() const { return tracker_.snapshot(); }
  void reset_peak() { tracker_.reset_peak(); }

 protected:
  // An allocator whose bytes count in `counted_with`'s statistics (the pinned host
  // allocator in the CPU allocator's: memory_stats(Device::cpu()) shows both).
  explicit Allocator(Allocator& counted_with) : tracker_(counted_with.tracker_) {}

 private:
  MemoryStatsTracker own_tracker_;

 protected:
  MemoryStatsTracker& tracker_ = own_tracker_;
};

// The size a caching allocator takes from the system for a request: a multiple of
// `small_step` below 1 MiB, above that one of four steps between consecutive
// powers of two (at most 25% more than asked).
size_t round_to_size_class(size_t nbytes, size_t small_step);

// The CPU allocator: 64-byte aligned blocks. Blocks of 1 MiB and more are kept
// when freed and reused for the next request of the same size class, so a
// training step does not return its large buffers to the system and fault them
// in again the next step (glibc maps blocks that large afresh each time).
// Statistics count the bytes requested; reserved_bytes adds the cache.
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kCacheMin = size_t{1} << 20;
  void* allocate(size_t nbytes, MemoryTag tag, int index) override;
  void deallocate(void* ptr, size_t nbytes, MemoryTag tag) override;
  void empty_cache();  // returns the cached blocks to the system

 private:
  void release_cache_locked();

  std::mutex mutex_;
  std::multimap<size_t, void*> cached_;  // by block size
};

// The allocator of a device type; throws a clear error when none is registered
// (e.g. cuda in a build without CUDA) and for meta.
Allocator& get_allocator(Device device);
void set_allocator(DeviceType type, Allocator* allocator);

// The allocator of pinned (page-locked) host memory, which host<->device copies
// can use asynchronously (Tensor::pin_memory, TensorOptions::pin_memory). The CUDA
// backend registers it; without CUDA, or on a machine without a GPU, this throws
// a clear error.
Allocator& get_pinned_allocator();
void set_pinned_allocator(Allocator* allocator);

MemoryStats memory_stats(Device device);
void reset_peak_memory_stats(Device device);

}  // namespace dtr
