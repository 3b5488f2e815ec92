// Allocators: one per device type, each counting its bytes by MemoryTag.
//
// The CPU allocator returns 64-byte aligned blocks. Device backends register
// their allocator explicitly with set_allocator() from their init function (no
// static initialisers: dtr is a static library and the linker would drop them).
// The meta device has no allocator: meta storage holds no memory. Statistics are
// kept per allocator, i.e. per device type (dtr runs one GPU per process).
#pragma once

#include "dtensor/device.h"
#include "dtensor/memory_stats.h"

#include <cstddef>

namespace dtr {

class Allocator {
 public:
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
  MemoryStatsTracker tracker_;
};

class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  void* allocate(size_t nbytes, MemoryTag tag, int index) override;
  void deallocate(void* ptr, size_t nbytes, MemoryTag tag) override;
};

// The allocator of a device type; throws a clear error when none is registered
// (e.g. cuda in a build without CUDA) and for meta.
Allocator& get_allocator(Device device);
void set_allocator(DeviceType type, Allocator* allocator);

MemoryStats memory_stats(Device device);
void reset_peak_memory_stats(Device device);

}  // namespace dtr
