// Tensor: a cheap, shareable handle to a strided view of a Storage.
//
// Copying a Tensor copies the handle (both refer to the same data, like PyTorch).
// Views (view, reshape when possible, transpose, permute, narrow, slice, select,
// expand, squeeze/unsqueeze) share storage and never copy; contiguous(), clone(),
// to() and reshape of a non-viewable layout copy. Sizes and strides are in
// elements. Dims may be negative (counted from the end) wherever a dim is taken.
//
// Factories (empty, zeros, ones, full, arange, from_vector) live in factory.h;
// math ops in the ops/ headers; printing in to_string().
#pragma once

#include "dtr/tensor/device.h"
#include "dtr/tensor/dtype.h"
#include "dtr/tensor/memory_stats.h"
#include "dtr/tensor/scalar.h"
#include "dtr/tensor/storage.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtr {

namespace autograd {
struct AutogradMeta;
class Node;
}  // namespace autograd

using Shape = std::vector<int64_t>;

int64_t numel_of(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[4, 8]"

// Where a fill's tensor sits in a larger logical row-major tensor: it is the box of
// `logical_shape` starting at `offset` (one entry per dim, same rank as the tensor),
// e.g. rows [k, k + m) of an [n, d] parameter are {.logical_shape = {n, d}, .offset = {k, 0}}.
// Both empty (the default) means the tensor is the whole logical tensor.
struct LogicalSlice {
  Shape logical_shape{};
  Shape offset{};

  bool is_whole() const { return logical_shape.empty() && offset.empty(); }
};

// What a factory allocates: dtype, device (the default device, see
// dtr/tensor/device.h, when not given) and the memory tag the bytes are
// counted under (the thread's current tag when not given); pin_memory: a CPU
// tensor in pinned host memory (needs the CUDA backend and a GPU).
struct TensorOptions {
  DType dtype = DType::f32;
  Device device = default_device();
  std::optional<MemoryTag> tag{};
  bool pin_memory = false;
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor
  Tensor(Storage storage, Shape sizes, Shape strides, int64_t storage_offset, DType dtype);

  bool defined() const { return impl_ != nullptr; }
  // True when both handles refer to the same tensor object (not merely the same data).
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  // How many handles share this tensor object (autograd takes over a gradient
  // nobody else holds instead of copying it).
  long use_count() const { return impl_.use_count(); }
  // A reference that does not keep this tensor object alive. Two weak references
  // name the same object when neither is std::owner_less than the other, which
  // stays exact after the object is gone (no address reuse).
  std::weak_ptr<const void> weak_ref() const;

  // --- metadata ---
  const Shape& sizes() const;
  const Shape& strides() const;
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const;
  int64_t numel() const;
  int64_t storage_offset() const;
  DType dtype() const;
  Device device() const;
  const Storage& storage() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(dtype()); }
  bool is_contiguous() const;
  // Wraps a possibly negative dim into [0, dim()); throws naming the op otherwise.
  int64_t wrap_dim(int64_t dim, const char* op = "dim") const;

  // Typed pointer to the first element (storage offset applied). The dtype must match T.
  template <class T>
  T* data() const {
    DTR_CHECK(dtype() == dtype_of<T>, "data<{}>() on a tensor of dtype {}", dtype_name(dtype_of<T>),
              dtype());
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const;  // untyped pointer to the first element; null on meta

  // --- views (no copy) ---
  Tensor view(Shape shape) const;     // -1 infers one dim; strides must allow it
  Tensor reshape(Shape shape) const;  // a view when possible, else a contiguous copy
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // transpose of a 2-D tensor
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  // Python-style slice [start, end) with step > 0; start/end may be negative and are clamped.
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;  // removes dim
  Tensor expand(Shape shape) const;                 // -1 keeps a size; new dims on the left
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;  // only a size-1 dim
  Tensor as_strided(Shape sizes, Shape strides, int64_t storage_offset) const;

  // --- copies and conversions ---
  Tensor contiguous() const;  // itself when already contiguous
  Tensor clone() const;
  Tensor to(Device device) const;  // itself when already there
  Tensor to(DType dtype) const;    // itself when already that dtype
  // In-place writes change the data, not the handle, so they work on const handles.
  const Tensor& copy_(const Tensor& src) const;  // src broadcast to this shape, converted to this dtype
  const Tensor& fill_(Scalar value) const;
  const Tensor& zero_() const { return fill_(0); }
  // A contiguous copy of this CPU tensor in pinned (page-locked) host memory,
  // counted under the same MemoryTag; itself when already pinned (as torch).
  // copy_ from pinned memory to a GPU is a direct DMA and still waits; the
  // non-waiting copies are cuda::copy_to_device_async / copy_to_host_async
  // (dtr/tensor/cuda/cuda_copy.h). Throws a clear error for a CUDA or meta tensor,
  // and without CUDA or a GPU.
  Tensor pin_memory() const;
  bool is_pinned() const { return storage().is_pinned(); }  // views of pinned memory too

  // Elements in row-major order; T must be the tensor's dtype.
  template <class T>
  std::vector<T> to_vector() const;
  // The single element of a one-element tensor.
  template <class T>
  T item() const;
  double item() const;  // any dtype, as double

  std::string to_string() const;

  // --- autograd (implemented in dtr/tensor/autograd/tensor_autograd.cpp) ---
  bool requires_grad() const;
  // Marks a leaf as needing gradients (floating dtypes only). Returns *this.
  const Tensor& requires_grad_(bool on = true) const;
  bool is_leaf() const;  // no grad_fn: created by the user, or not requiring grad
  // The gradient accumulated by backward() (leaves, and non-leaves after retain_grad()).
  const Tensor& grad() const;
  void set_grad(const Tensor& grad) const;  // set_grad({}) drops it
  std::shared_ptr<autograd::Node> grad_fn() const;
  uint32_t output_nr() const;
  // Backpropagates from this tensor: `grad` defaults to 1 for a one-element tensor.
  void backward(const Tensor& grad = {}, bool retain_graph = false) const;
  Tensor detach() const;     // same data, no history, does not require grad
  void retain_grad() const;  // keep .grad() on a non-leaf too
  // Runs `hook` when this tensor's gradient has been computed, before it is used
  // (or accumulated, for a leaf); the hook may return a replacement gradient, or
  // an undefined tensor to keep it. Returns a handle for remove_hook().
  int register_hook(std::function<Tensor(const Tensor&)> hook) const;
  void remove_hook(int handle) const;
  // Marks an in-place write to this tensor's storage (autograd's saved-tensor check).
  void bump_version() const { storage().bump_version(); }
  autograd::AutogradMeta* autograd_meta() const;  // null when the tensor never met autograd
  autograd::AutogradMeta& ensure_autograd_meta() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  const Impl& impl() const;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace dtr
