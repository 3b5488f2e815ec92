#include "dtr/tensor/tensor.h"

#include "dtr/kernels/cpu/copy.h"
#include "dtr/tensor/autograd/autograd_meta.h"
#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"

#ifdef DTR_WITH_CUDA
#include "dtr/tensor/cuda/cuda_copy.h"
#endif

#include <algorithm>
#include <numeric>
#include <ostream>

namespace dtr {

struct Tensor::Impl {
  Storage storage;
  Shape sizes;
  Shape strides;
  int64_t storage_offset = 0;
  DType dtype = DType::f32;
  std::unique_ptr<autograd::AutogradMeta> autograd;
};

std::weak_ptr<const void> Tensor::weak_ref() const { return impl_; }

autograd::AutogradMeta* Tensor::autograd_meta() const { return impl().autograd.get(); }

autograd::AutogradMeta& Tensor::ensure_autograd_meta() const {
  DTR_CHECK(impl_ != nullptr, "autograd on an undefined tensor");
  if (!impl_->autograd) impl_->autograd = std::make_unique<autograd::AutogradMeta>();
  return *impl_->autograd;
}

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    strides[d] = s;
    s *= std::max<int64_t>(shape[d], 1);
  }
  return strides;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

Tensor::Tensor(Storage storage, Shape sizes, Shape strides, int64_t storage_offset, DType dtype)
    : impl_(std::make_shared<Impl>()) {
  DTR_INTERNAL_ASSERT(sizes.size() == strides.size(), "sizes {} vs strides {}", shape_str(sizes),
                      shape_str(strides));
  for (int64_t s : sizes) DTR_CHECK(s >= 0, "tensor sizes must be non-negative, got {}", shape_str(sizes));
  impl_->storage = std::move(storage);
  impl_->sizes = std::move(sizes);
  impl_->strides = std::move(strides);
  impl_->storage_offset = storage_offset;
  impl_->dtype = dtype;
}

const Tensor::Impl& Tensor::impl() const {
  DTR_CHECK(impl_ != nullptr, "operation on an undefined tensor");
  return *impl_;
}

const Shape& Tensor::sizes() const { return impl().sizes; }
const Shape& Tensor::strides() const { return impl().strides; }
int64_t Tensor::size(int64_t dim) const { return impl().sizes[wrap_dim(dim, "size")]; }
int64_t Tensor::stride(int64_t dim) const { return impl().strides[wrap_dim(dim, "stride")]; }
int64_t Tensor::dim() const { return static_cast<int64_t>(impl().sizes.size()); }
int64_t Tensor::numel() const { return numel_of(impl().sizes); }
int64_t Tensor::storage_offset() const { return impl().storage_offset; }
DType Tensor::dtype() const { return impl().dtype; }
Device Tensor::device() const { return impl().storage.device(); }
const Storage& Tensor::storage() const { return impl().storage; }

bool Tensor::is_contiguous() const {
  const Impl& m = impl();
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (m.sizes[d] == 1) continue;
    if (m.sizes[d] == 0) return true;
    if (m.strides[d] != expected) return false;
    expected *= m.sizes[d];
  }
  return true;
}

int64_t Tensor::wrap_dim(int64_t d, const char* op) const {
  int64_t n = dim();
  DTR_CHECK(d >= -n && d < n, "{}: dim {} is out of range for a {}-d tensor of shape {}", op, d, n,
            shape_str(sizes()));
  return d < 0 ? d + n : d;
}

void* Tensor::raw_data() const {
  const Impl& m = impl();
  if (m.storage.device().is_meta() || m.storage.data() == nullptr) return nullptr;
  return static_cast<char*>(m.storage.data()) + m.storage_offset * element_size(m.dtype);
}

// ---------------------------------------------------------------- views

namespace {

// Resolves one -1 in `shape` so that it holds `numel` elements.
Shape infer_shape(Shape shape, int64_t numel, const Shape& from) {
  int64_t infer_at = -1, known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      DTR_CHECK(infer_at < 0, "view: only one dim can be -1, got {}", shape_str(shape));
      infer_at = static_cast<int64_t>(i);
    } else {
      DTR_CHECK(shape[i] >= 0, "view: invalid size {} in {}", shape[i], shape_str(shape));
      known *= shape[i];
    }
  }
  if (infer_at >= 0) {
    DTR_CHECK(known != 0 && numel % known == 0,
              "view: shape {} is invalid for a tensor of shape {} ({} elements)", shape_str(shape),
              shape_str(from), numel);
    shape[infer_at] = numel / known;
  }
  DTR_CHECK(numel_of(shape) == numel, "view: shape {} is invalid for a tensor of shape {} ({} elements)",
            shape_str(shape), shape_str(from), numel);
  return shape;
}

// Strides that let `new_sizes` view memory laid out as (old_sizes, old_strides),
// or nothing when that needs a copy (PyTorch's computeStride).
std::optional<Shape> view_strides(const Shape& old_sizes, const Shape& old_strides,
                                  const Shape& new_sizes) {
  if (old_sizes.empty()) return Shape(new_sizes.size(), 1);
  int64_t numel = numel_of(old_sizes);
  if (numel == 0) return contiguous_strides(new_sizes);
  Shape new_strides(new_sizes.size(), 1);
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(old_sizes.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_sizes[tensor_d];
    if (tensor_d == 0 || (old_sizes[tensor_d - 1] != 1 &&
                          old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        new_strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

}  // namespace

namespace {

// A view of t's storage with a new geometry: no autograd history. Each view
// method records its own backward around it.
Tensor make_view(const Tensor& t, Shape sizes, Shape strides, int64_t storage_offset) {
  return Tensor(t.storage(), std::move(sizes), std::move(strides), storage_offset, t.dtype());
}

}  // namespace

Tensor Tensor::as_strided(Shape sizes, Shape strides, int64_t storage_offset) const {
  DTR_CHECK(!autograd::needs_grad({this}),
            "as_strided: not differentiable; use view, narrow, select, expand or permute on a "
            "tensor that requires grad");
  return make_view(*this, std::move(sizes), std::move(strides), storage_offset);
}

Tensor Tensor::detach() const { return make_view(*this, sizes(), strides(), storage_offset()); }

Tensor Tensor::view(Shape shape) const {
  shape = infer_shape(std::move(shape), numel(), sizes());
  auto strides_opt = view_strides(sizes(), strides(), shape);
  DTR_CHECK(strides_opt.has_value(),
            "view: a tensor of shape {} and strides {} cannot be viewed as {} without a copy; "
            "use reshape()",
            shape_str(sizes()), shape_str(strides()), shape_str(shape));
  return autograd::record_unary(*this, make_view(*this, std::move(shape), std::move(*strides_opt), storage_offset()),
                                "ViewBackward", [in = sizes()](const Tensor& g) { return g.reshape(in); });
}

Tensor Tensor::reshape(Shape shape) const {
  shape = infer_shape(std::move(shape), numel(), sizes());
  if (auto strides_opt = view_strides(sizes(), strides(), shape)) {
    return autograd::record_unary(
        *this, make_view(*this, std::move(shape), std::move(*strides_opt), storage_offset()),
        "ReshapeBackward", [in = sizes()](const Tensor& g) { return g.reshape(in); });
  }
  return contiguous().view(std::move(shape));
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  start_dim = wrap_dim(start_dim, "flatten");
  end_dim = wrap_dim(end_dim, "flatten");
  DTR_CHECK(start_dim <= end_dim, "flatten: start_dim {} is after end_dim {}", start_dim, end_dim);
  Shape shape(sizes().begin(), sizes().begin() + start_dim);
  int64_t merged = 1;
  for (int64_t d = start_dim; d <= end_dim; ++d) merged *= size(d);
  shape.push_back(merged);
  shape.insert(shape.end(), sizes().begin() + end_dim + 1, sizes().end());
  return reshape(std::move(shape));
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  dim0 = wrap_dim(dim0, "transpose");
  dim1 = wrap_dim(dim1, "transpose");
  Shape s = sizes(), st = strides();
  std::swap(s[dim0], s[dim1]);
  std::swap(st[dim0], st[dim1]);
  return autograd::record_unary(*this, make_view(*this, std::move(s), std::move(st), storage_offset()),
                                "TransposeBackward",
                                [dim0, dim1](const Tensor& g) { return g.transpose(dim0, dim1); });
}

Tensor Tensor::t() const {
  DTR_CHECK(dim() == 2, "t: expected a 2-d tensor, got shape {}", shape_str(sizes()));
  return transpose(0, 1);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  DTR_CHECK(static_cast<int64_t>(dims.size()) == dim(),
            "permute: got {} dims [{}] for a {}-d tensor of shape {}", dims.size(),
            fmt::join(dims, ", "), dim(), shape_str(sizes()));
  Shape s(dims.size()), st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], "permute");
    DTR_CHECK(!seen[d], "permute: dim {} appears twice in [{}]", d, fmt::join(dims, ", "));
    seen[d] = true;
    s[i] = size(d);
    st[i] = stride(d);
  }
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[wrap_dim(dims[i])] = static_cast<int64_t>(i);
  return autograd::record_unary(*this, make_view(*this, std::move(s), std::move(st), storage_offset()),
                                "PermuteBackward",
                                [inverse](const Tensor& g) { return g.permute(inverse); });
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, "narrow");
  int64_t n = size(d);
  if (start < 0) start += n;
  DTR_CHECK(start >= 0 && length >= 0 && start + length <= n,
            "narrow: [{}, {}) is out of range for dim {} of size {} (shape {})", start,
            start + length, d, n, shape_str(sizes()));
  Shape s = sizes();
  s[d] = length;
  return autograd::record_unary(
      *this, make_view(*this, std::move(s), strides(), storage_offset() + start * stride(d)),
      "NarrowBackward", [in = sizes(), d, start, length](const Tensor& g) {
        Tensor grad = zeros(in, {.dtype = g.dtype(), .device = g.device()});
        grad.narrow(d, start, length).copy_(g);
        return grad;
      });
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d, "slice");
  DTR_CHECK(step > 0, "slice: step must be positive, got {}", step);
  int64_t n = size(d);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = sizes(), st = strides();
  s[d] = (end - start + step - 1) / step;
  st[d] *= step;
  return autograd::record_unary(
      *this, make_view(*this, std::move(s), std::move(st), storage_offset() + start * stride(d)),
      "SliceBackward", [in = sizes(), d, start, end, step](const Tensor& g) {
        Tensor grad = zeros(in, {.dtype = g.dtype(), .device = g.device()});
        grad.slice(d, start, end, step).copy_(g);
        return grad;
      });
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = wrap_dim(d, "select");
  int64_t n = size(d);
  DTR_CHECK(index >= -n && index < n, "select: index {} is out of range for dim {} of size {}",
            index, d, n);
  if (index < 0) index += n;
  Shape s = sizes(), st = strides();
  int64_t offset = storage_offset() + index * st[d];
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return autograd::record_unary(*this, make_view(*this, std::move(s), std::move(st), offset),
                                "SelectBackward", [in = sizes(), d, index](const Tensor& g) {
                                  Tensor grad = zeros(in, {.dtype = g.dtype(), .device = g.device()});
                                  grad.select(d, index).copy_(g);
                                  return grad;
                                });
}

Tensor Tensor::expand(Shape shape) const {
  int64_t nd = static_cast<int64_t>(shape.size());
  DTR_CHECK(nd >= dim(), "expand: target {} has fewer dims than the tensor's shape {}",
            shape_str(shape), shape_str(sizes()));
  Shape st(nd);
  for (int64_t i = nd - 1; i >= 0; --i) {
    int64_t src = i - (nd - dim());
    if (src < 0) {
      DTR_CHECK(shape[i] >= 0, "expand: size -1 is not allowed for new leading dim {} in {}", i,
                shape_str(shape));
      st[i] = 0;
      continue;
    }
    if (shape[i] == -1) shape[i] = size(src);
    if (size(src) == shape[i]) {
      st[i] = stride(src);
    } else {
      DTR_CHECK(size(src) == 1, "expand: shape {} cannot be expanded to {}: dim {} has size {}",
                shape_str(sizes()), shape_str(shape), src, size(src));
      st[i] = 0;
    }
  }
  return autograd::record_unary(*this, make_view(*this, std::move(shape), std::move(st), storage_offset()),
                                "ExpandBackward",
                                [in = sizes()](const Tensor& g) { return autograd::sum_to(g, in); });
}

Tensor Tensor::unsqueeze(int64_t d) const {
  int64_t n = dim() + 1;
  DTR_CHECK(d >= -n && d < n, "unsqueeze: dim {} is out of range for a {}-d tensor", d, dim());
  if (d < 0) d += n;
  Shape s = sizes(), st = strides();
  int64_t new_stride = d < dim() ? st[d] * s[d] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, new_stride);
  return autograd::record_unary(*this, make_view(*this, std::move(s), std::move(st), storage_offset()),
                                "UnsqueezeBackward",
                                [in = sizes()](const Tensor& g) { return g.reshape(in); });
}

Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d, "squeeze");
  DTR_CHECK(size(d) == 1, "squeeze: dim {} has size {}, not 1 (shape {})", d, size(d),
            shape_str(sizes()));
  Shape s = sizes(), st = strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return autograd::record_unary(*this, make_view(*this, std::move(s), std::move(st), storage_offset()),
                                "SqueezeBackward",
                                [in = sizes()](const Tensor& g) { return g.reshape(in); });
}

// ---------------------------------------------------------------- copies

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

namespace {

// A new contiguous tensor with t's values, on `device` as `dtype` (no autograd).
Tensor copied(const Tensor& t, DType dtype, Device device) {
  Tensor out = empty(t.sizes(), {.dtype = dtype, .device = device});
  NoGradGuard no_grad;
  out.copy_(t);
  return out;
}

}  // namespace

Tensor Tensor::clone() const {
  return autograd::record_unary(*this, copied(*this, dtype(), device()), "CloneBackward",
                                [](const Tensor& g) { return g; });
}

Tensor Tensor::pin_memory() const {
  DTR_CHECK(device().is_cpu(), "pin_memory: expected a CPU tensor (only host memory can be pinned), found one on {}",
            device());
  if (is_pinned()) return *this;
  Tensor out = empty(sizes(), {.dtype = dtype(), .device = Device::cpu(), .tag = storage().tag(), .pin_memory = true});
  {
    NoGradGuard no_grad;
    out.copy_(*this);
  }
  return autograd::record_unary(*this, std::move(out), "PinMemoryBackward", [](const Tensor& g) { return g; });
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  return autograd::record_unary(*this, copied(*this, dtype(), target), "ToDeviceBackward",
                                [from = device()](const Tensor& g) { return g.to(from); });
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  Tensor out = copied(*this, target, device());
  if (!is_floating(target)) return out;  // integer results carry no gradient
  return autograd::record_unary(*this, std::move(out), "ToDTypeBackward",
                                [from = dtype()](const Tensor& g) { return g.to(from); });
}

const Tensor& Tensor::copy_(const Tensor& src_in) const {
  DTR_CHECK(src_in.defined(), "copy_: source tensor is undefined");
  DTR_CHECK(!autograd::needs_grad({&src_in}),
            "copy_: copying from a tensor that requires grad is not recorded by autograd; use "
            "clone() or to(), or copy under NoGradGuard");
  autograd::check_inplace("copy_", *this);
  NoGradGuard no_grad;  // the expand below is bookkeeping, not part of any graph
  Tensor src = src_in.expand(sizes());
  if (device().is_meta()) return *this;  // shape-only: nothing to copy
  DTR_CHECK(!src.device().is_meta(), "copy_: cannot copy from a meta tensor (it has no data) into {}",
            device());
  if (numel() == 0) return *this;
  if (device().is_cuda() || src.device().is_cuda()) {
#ifdef DTR_WITH_CUDA
    cuda::copy_tensor(*this, src);
    return *this;
#else
    DTR_FAIL("copy_: copies between {} and {} need the CUDA backend, which this build of dtr lacks",
             src.device(), device());
#endif
  }
  // A source that shares memory with the destination is copied out first, so an
  // overlapping copy never reads elements it has already written.
  if (src.storage().is_same(storage())) src = src.clone();
  dispatch_dtype(src.dtype(), [&](auto src_tag) {
    using From = typename decltype(src_tag)::type;
    dispatch_dtype(dtype(), [&](auto dst_tag) {
      using To = typename decltype(dst_tag)::type;
      kernels::cpu::copy<From, To>(static_cast<int>(dim()), sizes().data(), src.data<From>(),
                                   src.strides().data(), data<To>(), strides().data());
    });
  });
  return *this;
}

const Tensor& Tensor::fill_(Scalar value) const {
  autograd::check_inplace("fill_", *this);
  if (device().is_meta() || numel() == 0) return *this;
  if (device().is_cuda()) {
#ifdef DTR_WITH_CUDA
    cuda::fill_tensor(*this, value);
    return *this;
#else
    DTR_FAIL("fill_: tensors on {} need the CUDA backend, which this build of dtr lacks", device());
#endif
  }
  dispatch_dtype(dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::cpu::fill<T>(static_cast<int>(dim()), sizes().data(), data<T>(), strides().data(),
                          value.to<T>());
  });
  return *this;
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  DTR_CHECK(dtype() == dtype_of<T>, "to_vector<{}>() on a tensor of dtype {}", dtype_name(dtype_of<T>),
            dtype());
  DTR_CHECK(!device().is_meta(), "to_vector: a meta tensor has no data");
  Tensor host = to(Device::cpu()).contiguous();
  const T* p = host.data<T>();
  return std::vector<T>(p, p + numel());
}

template <class T>
T Tensor::item() const {
  DTR_CHECK(numel() == 1, "item: expected a tensor with one element, got shape {}", shape_str(sizes()));
  return to_vector<T>()[0];
}

double Tensor::item() const {
  return dispatch_dtype(dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return convert<double>(item<T>());
  });
}

#define DTR_INSTANTIATE_TENSOR_ACCESS(T)                \
  template std::vector<T> Tensor::to_vector<T>() const; \
  template T Tensor::item<T>() const;
DTR_FOR_EACH_SCALAR(DTR_INSTANTIATE_TENSOR_ACCESS)

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

}  // namespace dtr
