// Storage: a reference-counted block of device memory that tensors view.
// Several tensors (views) may share one Storage; the memory is returned to its
// allocator when the last one goes away. Meta storage remembers its size but
// holds no memory. CPU storage may be pinned (page-locked, from the pinned host
// allocator): the GPU copies to and from it asynchronously.
#pragma once

#include "dtr/tensor/device.h"
#include "dtr/tensor/memory_stats.h"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace dtr {

class Storage {
 public:
  Storage() = default;
  static Storage allocate(size_t nbytes, Device device, MemoryTag tag);
  // Pinned host memory (a CPU storage); throws a clear error without CUDA or a GPU.
  static Storage allocate_pinned(size_t nbytes, MemoryTag tag);

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
  bool is_pinned() const;
  // Moves this CPU storage's bytes into pinned memory, in place: every tensor
  // viewing it sees the same values, now pinned (FSDP's CPU offload pins shards
  // the user created, keeping the handles an optimizer holds). No-op when pinned.
  void pin() const;
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
