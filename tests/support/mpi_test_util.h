// Helpers shared by the multi-rank tests: tensors from doubles in any dtype, the
// values read back as doubles (values.h) or as raw bytes, and an empty directory
// every rank shares.
#pragma once

#include "dtr/mesh/distributed.h"
#include "dtr/mesh/process_group.h"

#include <catch2/catch.hpp>
#include "dtr/tensor/factory.h"
#include "dtr/tensor/tensor.h"
#include "tests/support/values.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace dtr::testing {

inline Tensor tensor_of(const std::vector<double>& values, DType dtype, Shape shape = {}) {
  return from_vector<double>(values, std::move(shape)).to(dtype);
}

// The raw bytes of a tensor's values (bit-for-bit comparisons).
inline std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor c = t.to(Device::cpu()).contiguous();
  std::vector<uint8_t> out(c.nbytes());
  if (!out.empty()) std::memcpy(out.data(), c.raw_data(), out.size());
  return out;
}

inline mesh::ProcessGroupPtr world() { return distributed::world_group(); }

// <working directory>/<area>/<name>_np<world size>, empty and existing on return
// on every rank (rank 0 makes it; the ranks meet in a barrier).
inline std::filesystem::path fresh_shared_dir(const std::string& area, const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::current_path() / area / (name + "_np" + std::to_string(distributed::world_size()));
  if (distributed::rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  world()->barrier()->wait();
  return dir;
}

// The largest difference between two tensors' values relative to the largest
// magnitude of `want` (infinite when their sizes differ).
inline double error_relative_to_scale(const Tensor& got, const Tensor& want) {
  const auto g = values_of(got), w = values_of(want);
  if (g.size() != w.size()) return INFINITY;
  double scale = 0, error = 0;
  for (size_t j = 0; j < g.size(); ++j) {
    scale = std::max(scale, std::abs(w[j]));
    error = std::max(error, std::abs(g[j] - w[j]));
  }
  return error / scale;
}

// Tests tagged [.np4] need exactly four ranks (2x2 meshes). They are hidden from a
// plain run, and CTest runs them in the 4-rank entries only (tests/CMakeLists.txt);
// at another world size this fails with the reason instead of passing unchecked.
inline void require_four_ranks() {
  INFO("this test needs a 2x2 mesh: run it under mpirun -np 4 (tag [.np4])");
  REQUIRE(distributed::world_size() == 4);
}

}  // namespace dtr::testing
