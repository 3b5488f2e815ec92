// Tensor factories: empty, zeros, ones, full, arange, from_vector, and their
// *_like forms. Every factory allocates through the device's allocator, counted
// under options.tag (or the thread's current MemoryTag). On the meta device they
// allocate nothing and write nothing.
#pragma once

#include "dtr/tensor/tensor.h"

#include <vector>

namespace dtr {

Tensor empty(const Shape& shape, const TensorOptions& options = {});
Tensor zeros(const Shape& shape, const TensorOptions& options = {});
Tensor ones(const Shape& shape, const TensorOptions& options = {});
Tensor full(const Shape& shape, Scalar value, const TensorOptions& options = {});
// [0, end) and [start, end) by step, like torch.arange (end excluded).
Tensor arange(Scalar end, const TensorOptions& options = {});
Tensor arange(Scalar start, Scalar end, Scalar step, const TensorOptions& options = {});

// Same shape, dtype and device as `like` (the tag from the thread's current tag).
Tensor empty_like(const Tensor& like);
Tensor zeros_like(const Tensor& like);
Tensor ones_like(const Tensor& like);

// A tensor of `shape` (default: 1-D of values.size()) holding `values` in row-major order.
template <class T>
Tensor from_vector(const std::vector<T>& values, Shape shape = {}, Device device = Device::cpu());

// A 0-dim tensor holding one value.
Tensor scalar_tensor(Scalar value, DType dtype, Device device = Device::cpu());

}  // namespace dtr
