// Helpers shared by the multi-rank tests: tensors from doubles in any dtype, and
// the values read back as doubles.
#pragma once

#include "dtensor/factory.h"
#include "dtensor/tensor.h"
#include "mesh/distributed.h"

#include <vector>

namespace dtr::testing {

inline Tensor tensor_of(const std::vector<double>& values, DType dtype, Shape shape = {}) {
  return from_vector<double>(values, std::move(shape)).to(dtype);
}

inline std::vector<double> values_of(const Tensor& t) { return t.contiguous().to(DType::f64).to_vector<double>(); }

inline mesh::ProcessGroupPtr world() { return distributed::world_group(); }

}  // namespace dtr::testing
