#include "dtr/tensor/factory.h"

#include "dtr/kernels/cpu/copy.h"

#ifdef DTR_WITH_CUDA
#include "dtr/tensor/cuda/cuda_copy.h"
#endif

#include <cmath>
#include <cstring>

namespace dtr {

Tensor empty(const Shape& shape, const TensorOptions& options) {
  for (int64_t s : shape) DTR_CHECK(s >= 0, "empty: sizes must be non-negative, got {}", shape_str(shape));
  size_t nbytes = static_cast<size_t>(numel_of(shape)) * element_size(options.dtype);
  const MemoryTag tag = options.tag.value_or(current_memory_tag());
  DTR_CHECK(!options.pin_memory || options.device.is_cpu(),
            "empty: pin_memory applies to host memory: expected device cpu, found {}", options.device);
  Storage storage = options.pin_memory ? Storage::allocate_pinned(nbytes, tag)
                                       : Storage::allocate(nbytes, options.device, tag);
  return Tensor(std::move(storage), shape, contiguous_strides(shape), 0, options.dtype);
}

Tensor zeros(const Shape& shape, const TensorOptions& options) {
  return full(shape, 0, options);
}

Tensor ones(const Shape& shape, const TensorOptions& options) { return full(shape, 1, options); }

Tensor full(const Shape& shape, Scalar value, const TensorOptions& options) {
  Tensor t = empty(shape, options);
  t.fill_(value);
  return t;
}

Tensor arange(Scalar end, const TensorOptions& options) { return arange(0, end, 1, options); }

Tensor arange(Scalar start, Scalar end, Scalar step, const TensorOptions& options) {
  double s = start.to_double(), e = end.to_double(), st = step.to_double();
  DTR_CHECK(st != 0, "arange: step must be non-zero");
  DTR_CHECK((st > 0 && e >= s) || (st < 0 && e <= s),
            "arange: step {} does not lead from start {} to end {}", st, s, e);
  auto n = static_cast<int64_t>(std::ceil((e - s) / st));
  Tensor t = empty({n}, options);
  if (t.device().is_meta() || n == 0) return t;
  if (t.device().is_cuda()) {
#ifdef DTR_WITH_CUDA
    cuda::arange_tensor(t, s, st);
    return t;
#else
    DTR_FAIL("arange: tensors on {} need the CUDA backend, which this build of dtr lacks", t.device());
#endif
  }
  dispatch_dtype(options.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::cpu::arange<T>(t.data<T>(), n, s, st);
  });
  return t;
}

Tensor empty_like(const Tensor& like) {
  return empty(like.sizes(), {.dtype = like.dtype(), .device = like.device()});
}
Tensor zeros_like(const Tensor& like) {
  return zeros(like.sizes(), {.dtype = like.dtype(), .device = like.device()});
}
Tensor ones_like(const Tensor& like) {
  return ones(like.sizes(), {.dtype = like.dtype(), .device = like.device()});
}

template <class T>
Tensor from_vector(const std::vector<T>& values, Shape shape, Device device) {
  if (shape.empty() && values.size() != 1) shape = {static_cast<int64_t>(values.size())};
  DTR_CHECK(numel_of(shape) == static_cast<int64_t>(values.size()),
            "from_vector: {} values do not fill shape {} ({} elements)", values.size(),
            shape_str(shape), numel_of(shape));
  Tensor host = empty(shape, {.dtype = dtype_of<T>, .device = Device::cpu()});
  if (!values.empty()) std::memcpy(host.raw_data(), values.data(), values.size() * sizeof(T));
  return host.to(device);
}

#define DTR_INSTANTIATE_FROM_VECTOR(T) \
  template Tensor from_vector<T>(const std::vector<T>&, Shape, Device);
DTR_FOR_EACH_SCALAR(DTR_INSTANTIATE_FROM_VECTOR)

Tensor scalar_tensor(Scalar value, DType dtype, Device device) {
  return full({}, value, {.dtype = dtype, .device = device});
}

}  // namespace dtr
