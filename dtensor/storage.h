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
  // Frees the memory but keeps the size and version; the tensors viewing it must
  // not be read until reallocate(). FSDP frees unsharded parameters this way while
  // autograd still holds them (PyTorch resizes the storage to 0).
  void release() const;
  // Allocates nbytes() again (contents undefined) after release(); no-op when allocated.
  void reallocate() const;
  bool is_allocated() const;
  // Sets the version back after runtime code refilled memory that autograd saved
  // (FSDP's all-gather into a released parameter), like PyTorch's
  // _unsafe_preserve_version_counter. Not for user code.
  void restore_version(uint64_t version) const;
  bool is_same(const Storage& other) const { return impl_ == other.impl_; }

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace dtr
