#include "dtr/tensor/memory_stats.h"

#include <fmt/format.h>

#include <algorithm>

namespace dtr {

std::string_view memory_tag_name(MemoryTag tag) {
  switch (tag) {
    case MemoryTag::param: return "param";
    case MemoryTag::grad: return "grad";
    case MemoryTag::optimizer_state: return "optimizer_state";
    case MemoryTag::activation: return "activation";
    case MemoryTag::comm_buffer: return "comm_buffer";
    case MemoryTag::checkpoint_staging: return "checkpoint_staging";
    case MemoryTag::other: return "other";
  }
  return "?";
}

std::string MemoryStats::to_string() const {
  std::string out = fmt::format("{:<18} {:>14} {:>14} {:>8}\n", "tag", "current_bytes", "peak_bytes",
                                "live");
  auto row = [&](std::string_view name, const MemoryCounter& c) {
    out += fmt::format("{:<18} {:>14} {:>14} {:>8}\n", name, c.current_bytes, c.peak_bytes,
                       c.live_allocations);
  };
  for (int i = 0; i < kNumMemoryTags; ++i) row(memory_tag_name(static_cast<MemoryTag>(i)), by_tag[i]);
  row("total", total);
  return out;
}

namespace {
void add(MemoryCounter& c, int64_t bytes) {
  c.current_bytes += bytes;
  c.peak_bytes = std::max(c.peak_bytes, c.current_bytes);
}
}  // namespace

void MemoryStatsTracker::on_allocate(int64_t bytes, MemoryTag tag) {
  std::lock_guard lock(mutex_);
  for (MemoryCounter* c : {&stats_.by_tag[static_cast<size_t>(tag)], &stats_.total}) {
    add(*c, bytes);
    ++c->live_allocations;
    ++c->num_allocations;
  }
}

void MemoryStatsTracker::on_free(int64_t bytes, MemoryTag tag) {
  std::lock_guard lock(mutex_);
  for (MemoryCounter* c : {&stats_.by_tag[static_cast<size_t>(tag)], &stats_.total}) {
    c->current_bytes -= bytes;
    --c->live_allocations;
  }
}

void MemoryStatsTracker::on_retag(int64_t bytes, MemoryTag from, MemoryTag to) {
  if (from == to) return;
  std::lock_guard lock(mutex_);
  MemoryCounter& f = stats_.by_tag[static_cast<size_t>(from)];
  MemoryCounter& t = stats_.by_tag[static_cast<size_t>(to)];
  f.current_bytes -= bytes;
  --f.live_allocations;
  add(t, bytes);
  ++t.live_allocations;
}

void MemoryStatsTracker::add_reserved(int64_t delta) {
  std::lock_guard lock(mutex_);
  stats_.reserved_bytes += delta;
}

void MemoryStatsTracker::reset_peak() {
  std::lock_guard lock(mutex_);
  for (auto& c : stats_.by_tag) c.peak_bytes = c.current_bytes;
  stats_.total.peak_bytes = stats_.total.current_bytes;
}

MemoryStats MemoryStatsTracker::snapshot() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

namespace {
thread_local MemoryTag t_current_tag = MemoryTag::other;
}

MemoryTag current_memory_tag() { return t_current_tag; }

MemoryTagGuard::MemoryTagGuard(MemoryTag tag) : previous_(t_current_tag) { t_current_tag = tag; }

MemoryTagGuard::~MemoryTagGuard() { t_current_tag = previous_; }

}  // namespace dtr
