// DTensor at world sizes 1-4 (and a 2x2 mesh at 4): every placement transition
// and its gradient against the same computation on the full tensor in this
// process; random fills against the unsharded fill; uneven and empty shards.
#include "dtr/dtensor/dtensor.h"
#include "dtr/dtensor/redistribute.h"
#include "dtr/mesh/debug_collectives.h"
#include "dtr/mesh/device_mesh.h"
#include "tests/support/mpi_test_util.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/reduce.h"

#include <catch2/catch.hpp>

using namespace dtr;
using dtr::mesh::DeviceMesh;
using dtr::mesh::init_device_mesh;
using dtr::testing::values_of;

namespace {

const std::vector<Placement> kPlacements = {Shard(0), Shard(1), Replicate(), Partial()};

// The same pseudo-random global tensor on every rank (seeded fill).
Tensor global_tensor(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, {.dtype = DType::f64}, &gen);
}

// This rank's local tensor of `full` under `placements`, built by hand: narrow
// for shards (mesh order), and a share (r+1)/sum for Partial so shares add to full.
Tensor expected_local(const Tensor& full, const DeviceMesh& mesh, const Placements& placements) {
  Tensor x = full;
  for (int i = 0; i < mesh.ndim(); ++i) {
    const Placement& p = placements[i];
    const int64_t k = mesh.size(i), c = mesh.coordinate(i);
    if (p.is_shard()) {
      ShardRange r = shard_range(x.size(p.dim()), k, c);
      x = x.narrow(p.dim(), r.offset, r.length);
    } else if (p.is_partial()) {
      x = mul(x, Scalar(2.0 * (c + 1) / static_cast<double>(k * (k + 1))));
    }
  }
  return x.contiguous();
}

DTensor make_dtensor(const Tensor& full, const DeviceMesh& mesh, const Placements& placements) {
  return DTensor::from_local(expected_local(full, mesh, placements).clone(), mesh, placements, {.shape = full.sizes()});
}

void require_near(const Tensor& got, const Tensor& expected) {
  REQUIRE(got.sizes() == expected.sizes());
  auto g = values_of(got), e = values_of(expected);
  for (size_t i = 0; i < g.size(); ++i) REQUIRE(g[i] == Approx(e[i]).margin(1e-12));
}

std::vector<Placements> all_placements(int ndim) {
  std::vector<Placements> result = {{}};
  for (int d = 0; d < ndim; ++d) {
    std::vector<Placements> next;
    for (const auto& prefix : result) {
      for (const auto& p : kPlacements) {
        Placements extended = prefix;
        extended.push_back(p);
        next.push_back(extended);
      }
    }
    result = next;
  }
  return result;
}

// Every transition between every pair of placements on `mesh`, for `shape`:
// values and gradients against the full tensor.
void check_all_transitions(const DeviceMesh& mesh, const Shape& shape) {
  const Tensor full = global_tensor(shape, 1234);
  const Tensor weight = global_tensor(shape, 99);  // d/dx sum(x * weight) = weight
  for (const auto& from : all_placements(mesh.ndim())) {
    for (const auto& to : all_placements(mesh.ndim())) {
      INFO(to_string(from) << " -> " << to_string(to) << " shape " << shape_str(shape));
      DTensor x = make_dtensor(full, mesh, from);
      x.to_local().requires_grad_();
      DTensor y = x.redistribute(to);
      REQUIRE(y.placements() == to);
      if (!y.spec().has_partial()) require_near(y.to_local(), expected_local(full, mesh, to));
      Tensor y_full = y.full_tensor();
      require_near(y_full, full);
      sum(mul(y_full, weight)).backward();
      DTensor g = x.grad();
      REQUIRE(g.defined());
      REQUIRE(g.placements() == dtensor::gradient_placements(from));
      require_near(g.full_tensor(), weight);
    }
  }
}

}  // namespace

TEST_CASE("every placement transition on a 1-D mesh gives the full tensor's values and gradients") {
  auto mesh = init_device_mesh(DeviceType::cpu, {distributed::world_size()}, {"dp"});
  check_all_transitions(mesh, {8, 6});
  check_all_transitions(mesh, {7, 5});  // uneven over 2, 3 and 4 ranks
  check_all_transitions(mesh, {2, 3});  // empty shards at 3 and 4 ranks
}

TEST_CASE("every placement transition on a 2x2 mesh at 4 ranks", "[.np4]") {
  testing::require_four_ranks();
  auto mesh = init_device_mesh(DeviceType::cpu, {2, 2}, {"replicate", "shard"});
  check_all_transitions(mesh, {8, 4});
  check_all_transitions(mesh, {7, 3});
  check_all_transitions(mesh, {3, 2});
}

TEST_CASE("distribute_tensor keeps each rank's chunk, from every rank or from a source rank") {
  const int n = distributed::world_size(), me = distributed::rank();
  auto mesh = init_device_mesh(DeviceType::cpu, {n});
  const Tensor full = global_tensor({7, 3}, 5);
  DTensor d = distribute_tensor(full, mesh, {Shard(0)});
  require_near(d.to_local(), expected_local(full, mesh, {Shard(0)}));
  REQUIRE(d.shape() == Shape{7, 3});
  // Only rank 0 has the data; the others pass zeros of the same shape.
  Tensor mine = me == 0 ? full : zeros({7, 3}, {.dtype = DType::f64});
  DTensor from_source = distribute_tensor(mine, mesh, {Shard(1)}, 0);
  require_near(from_source.full_tensor(), full);
}

TEST_CASE("random DTensors equal the unsharded random tensor element for element") {
  const int n = distributed::world_size();
  auto mesh = init_device_mesh(DeviceType::cpu, {n});
  for (const Placements& placements : {Placements{Shard(0)}, Placements{Shard(1)}, Placements{Replicate()}}) {
    Generator a(42), b(42);
    DTensor d = DTensor::randn({9, 5}, mesh, placements, {.dtype = DType::f32}, &a);
    Tensor reference = randn({9, 5}, {.dtype = DType::f32}, &b);
    REQUIRE(values_of(d.full_tensor()) == values_of(reference));  // bit for bit
    REQUIRE(a.offset() == b.offset());  // the generators stay in step
  }
}

TEST_CASE("factories allocate only the local part, also on meta") {
  const int n = distributed::world_size();
  auto mesh = init_device_mesh(DeviceType::cpu, {n});
  DTensor z = DTensor::zeros({7, 2}, mesh, {Shard(0)});
  REQUIRE(z.to_local().sizes() == Shape{shard_range(7, n, distributed::rank()).length, 2});
  DTensor meta = DTensor::empty({1000, 1000}, mesh, {Shard(0)}, {.device = Device::meta()});
  REQUIRE(meta.to_local().device().is_meta());
  REQUIRE(meta.to_local().sizes()[0] == shard_range(1000, n, distributed::rank()).length);
  DTensor o = DTensor::ones({3, 3}, mesh, {Partial()});
  require_near(o.full_tensor(), ones({3, 3}));
}

TEST_CASE("bad DTensors are clear errors: placement dims, placement counts, inconsistent local shapes") {
  const int n = distributed::world_size();
  auto mesh = init_device_mesh(DeviceType::cpu, {n});
  REQUIRE_THROWS_WITH(DTensor::zeros({4, 4}, mesh, {Shard(2)}), Catch::Contains("Shard(2) is out of range"));
  REQUIRE_THROWS_WITH(DTensor::zeros({4, 4}, mesh, {Shard(0), Replicate()}),
                      Catch::Contains("one placement per mesh dim"));
  REQUIRE_THROWS_WITH(Partial(mesh::ReduceOp::premul_sum(2)), Catch::Contains("sum, avg, max or min"));
  if (n < 2) return;
  Tensor local = zeros({distributed::rank() == 0 ? 3 : 2, 2});
  REQUIRE_THROWS_WITH(DTensor::from_local(local, mesh, {Shard(0)}, {.run_check = true}),
                      Catch::Contains("local shapes do not fit"));
}
