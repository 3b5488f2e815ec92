// Helpers for the multi-rank tests of ops on DTensors: run an op on DTensors made
// from full tensors with given placements, and compare the full result and the
// full gradients of every input with the same local op on the full tensors in
// this process (loss sum(out * w) with a random w, so gradients are non-trivial).
#pragma once

#include "dtr/dtensor/dtensor.h"
#include "dtr/mesh/device_mesh.h"
#include "tests/support/mpi_test_util.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/reduce.h"

#include <catch2/catch.hpp>

#include <functional>
#include <vector>

namespace dtr::testing {

inline Tensor random_full(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, {.dtype = DType::f64}, &gen);
}

inline void require_close(const Tensor& got, const Tensor& expected, double tol = 1e-10) {
  REQUIRE(got.sizes() == expected.sizes());
  auto g = values_of(got), e = values_of(expected);
  for (size_t i = 0; i < g.size(); ++i) REQUIRE(g[i] == Approx(e[i]).margin(tol).epsilon(tol));
}

struct OpInput {
  Tensor full;
  Placements placements;
  bool grad = true;  // floating inputs whose gradient is checked
};

using DistFn = std::function<DTensor(const std::vector<DTensor>&)>;
using LocalFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Returns the DTensor result (for checks of its placements).
inline DTensor check_op(const mesh::DeviceMesh& mesh, const std::vector<OpInput>& inputs, const DistFn& dist_fn,
                        const LocalFn& local_fn, double tol = 1e-10) {
  std::vector<DTensor> d;
  std::vector<Tensor> ref;
  for (const auto& in : inputs) {
    INFO("input " << shape_str(in.full.sizes()) << " " << to_string(in.placements));
    // A fresh copy: with Replicate the DTensor may hold the very tensor it was given.
    DTensor x = distribute_tensor(in.full.detach().clone(), mesh, in.placements);
    Tensor r = in.full.detach().clone();
    if (in.grad) {
      x.requires_grad_();
      r.requires_grad_();
    }
    d.push_back(x);
    ref.push_back(r);
  }
  DTensor out = dist_fn(d);
  Tensor expected = local_fn(ref);
  Tensor got = out.full_tensor();
  require_close(got, expected, tol);
  const Tensor w = random_full(expected.sizes(), 777).to(expected.dtype());
  bool any_grad = false;
  for (const auto& in : inputs) any_grad = any_grad || in.grad;
  if (!any_grad || !is_floating(expected.dtype())) return out;
  sum(mul(got, w)).backward();
  sum(mul(expected, w)).backward();
  for (size_t j = 0; j < inputs.size(); ++j) {
    if (!inputs[j].grad) continue;
    INFO("gradient of input " << j);
    DTensor g = d[j].grad();
    REQUIRE(g.defined());
    REQUIRE(ref[j].grad().defined());
    require_close(g.full_tensor(), ref[j].grad(), tol);
  }
  return out;
}

// The placements of a 1-D mesh valid for an `ndim`-dim tensor.
inline std::vector<Placements> placements_1d(int64_t ndim, bool partial = true) {
  std::vector<Placements> result = {{Replicate()}};
  for (int64_t d = 0; d < ndim; ++d) result.push_back({Shard(d)});
  if (partial) result.push_back({Partial()});
  return result;
}

// A selection of placements of a 2-D mesh valid for an `ndim`-dim tensor.
inline std::vector<Placements> placements_2d(int64_t ndim, bool partial = true) {
  std::vector<Placements> result = {{Replicate(), Replicate()}, {Shard(0), Replicate()}, {Replicate(), Shard(0)},
                                    {Shard(0), Shard(0)}};
  if (ndim >= 2) {
    result.push_back({Shard(0), Shard(ndim - 1)});
    result.push_back({Shard(ndim - 1), Replicate()});
  }
  if (partial) {
    result.push_back({Partial(), Shard(0)});
    result.push_back({Replicate(), Partial()});
  }
  return result;
}

}  // namespace dtr::testing
