#include "dtr/tensor/storage.h"

#include "dtr/base/error.h"
#include "dtr/tensor/allocator.h"

#include <atomic>
#include <cstring>

namespace dtr {

struct Storage::Impl {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  MemoryTag tag = MemoryTag::other;
  Allocator* allocator = nullptr;  // null for meta
  bool pinned = false;
  std::atomic<uint64_t> version{0};

  ~Impl() {
    if (allocator && data) allocator->deallocate(data, nbytes, tag);
  }
};

Storage Storage::allocate(size_t nbytes, Device device, MemoryTag tag) {
  Storage s;
  s.impl_ = std::make_shared<Impl>();
  s.impl_->nbytes = nbytes;
  s.impl_->device = device;
  s.impl_->tag = tag;
  if (!device.is_meta()) {
    Allocator& a = get_allocator(device);
    s.impl_->data = a.allocate(nbytes, tag, device.index);
    s.impl_->allocator = &a;
  }
  return s;
}

Storage Storage::allocate_pinned(size_t nbytes, MemoryTag tag) {
  Allocator& a = get_pinned_allocator();
  Storage s;
  s.impl_ = std::make_shared<Impl>();
  s.impl_->nbytes = nbytes;
  s.impl_->device = Device::cpu();
  s.impl_->tag = tag;
  s.impl_->data = a.allocate(nbytes, tag, 0);
  s.impl_->allocator = &a;
  s.impl_->pinned = true;
  return s;
}

void* Storage::data() const {
  DTR_INTERNAL_ASSERT(impl_ != nullptr);
  return impl_->data;
}

size_t Storage::nbytes() const { return impl_ ? impl_->nbytes : 0; }

Device Storage::device() const { return impl_ ? impl_->device : Device::cpu(); }

MemoryTag Storage::tag() const { return impl_ ? impl_->tag : MemoryTag::other; }

uint64_t Storage::version() const { return impl_ ? impl_->version.load() : 0; }

void Storage::bump_version() const {
  if (impl_) ++impl_->version;
}

void Storage::release() const {
  DTR_INTERNAL_ASSERT(impl_ != nullptr);
  if (impl_->allocator && impl_->data) impl_->allocator->deallocate(impl_->data, impl_->nbytes, impl_->tag);
  impl_->data = nullptr;
}

void Storage::reallocate() const {
  DTR_INTERNAL_ASSERT(impl_ != nullptr);
  if (impl_->data || !impl_->allocator) return;
  impl_->data = impl_->allocator->allocate(impl_->nbytes, impl_->tag, impl_->device.index);
}

bool Storage::is_allocated() const { return impl_ && (impl_->data != nullptr || impl_->device.is_meta()); }

bool Storage::is_pinned() const { return impl_ && impl_->pinned; }

void Storage::pin() const {
  DTR_INTERNAL_ASSERT(impl_ != nullptr);
  if (impl_->pinned) return;
  DTR_CHECK(impl_->device.is_cpu(), "pin: only host memory can be pinned: expected a CPU storage, found one on {}",
            impl_->device);
  Allocator& pinned = get_pinned_allocator();
  void* data = nullptr;
  if (impl_->data) {  // a released storage only changes allocator: reallocate() pins it
    data = pinned.allocate(impl_->nbytes, impl_->tag, 0);
    std::memcpy(data, impl_->data, impl_->nbytes);
    impl_->allocator->deallocate(impl_->data, impl_->nbytes, impl_->tag);
  }
  impl_->data = data;
  impl_->allocator = &pinned;
  impl_->pinned = true;
}

void Storage::restore_version(uint64_t version) const {
  if (impl_) impl_->version = version;
}

void Storage::set_tag(MemoryTag tag) const {
  DTR_INTERNAL_ASSERT(impl_ != nullptr);
  if (impl_->allocator && impl_->data) impl_->allocator->retag(impl_->nbytes, impl_->tag, tag);
  impl_->tag = tag;
}

}  // namespace dtr
