// Storage: a reference-counted block of device memory that tensors view.
// Several tensors (views) may share one Storage; the memory is returned to its
// allocator when the last one goes away. Meta storage remembers its size but
// holds no memory.
#pragma once

#include "dtensor/device.h"
#include "dtensor/memory_stats.h"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace dtr {

class Storage {
 public:
  Storage() = default;
  static Storage allocate(size_t nbytes, Device device, MemoryTag tag);

  bool defined() const { return impl_ != nullptr; }
  void* data() const;
  size_t nbytes() const;
  Device device() const;
  MemoryTag tag() const;
  // Re-counts this storage's bytes under another tag (e.g. an activation buffer
  // that becomes a gradient).
  void set_tag(MemoryTag tag) const;
  long use_count() const { return impl_.use_count(); }
  // Counts in-place writes; autograd checks it to catch a saved tensor modified
  // before backward used it.
  uint64_t version() const;
  void bump_version() const;
  bool is_same(const Storage& other) const { return impl_ == other.impl_; }

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace dtr
