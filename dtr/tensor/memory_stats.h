// Memory statistics by tag: how many bytes of each kind (parameters, gradients,
// optimizer state, activations, communication buffers, the copies an
// asynchronous checkpoint writes from, other) a device holds now and at its
// peak. FSDP's memory promise (about 1/N of the state per rank) is tested with
// these numbers, so they count exactly the bytes requested.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace dtr {

enum class MemoryTag : uint8_t { param, grad, optimizer_state, activation, comm_buffer, checkpoint_staging, other };
inline constexpr int kNumMemoryTags = 7;

std::string_view memory_tag_name(MemoryTag tag);

struct MemoryCounter {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;        // highest current_bytes since the last reset_peak()
  int64_t live_allocations = 0;  // allocations not yet freed
  int64_t num_allocations = 0;   // allocations made since the process started
};

struct MemoryStats {
  std::array<MemoryCounter, kNumMemoryTags> by_tag{};
  MemoryCounter total;  // all tags together (its peak is the peak of the sum)
  int64_t reserved_bytes = 0;  // bytes held from the system (caching allocators hold more than in use)

  const MemoryCounter& operator[](MemoryTag tag) const { return by_tag[static_cast<size_t>(tag)]; }
  std::string to_string() const;  // a small table, one line per tag
};

// Thread-safe bookkeeping used by every allocator.
class MemoryStatsTracker {
 public:
  void on_allocate(int64_t bytes, MemoryTag tag);
  void on_free(int64_t bytes, MemoryTag tag);
  void on_retag(int64_t bytes, MemoryTag from, MemoryTag to);
  // reserved_bytes += delta (several allocators may count into one tracker).
  void add_reserved(int64_t delta);
  void reset_peak();
  MemoryStats snapshot() const;

 private:
  mutable std::mutex mutex_;
  MemoryStats stats_;
};

// The memory tag that allocations made on this thread receive when the caller
// does not name one. MemoryTagGuard sets it for a scope:
//   { MemoryTagGuard g(MemoryTag::optimizer_state); auto m = zeros_like(p); }
MemoryTag current_memory_tag();

class MemoryTagGuard {
 public:
  explicit MemoryTagGuard(MemoryTag tag);
  ~MemoryTagGuard();
  MemoryTagGuard(const MemoryTagGuard&) = delete;
  MemoryTagGuard& operator=(const MemoryTagGuard&) = delete;

 private:
  MemoryTag previous_;
};

}  // namespace dtr
