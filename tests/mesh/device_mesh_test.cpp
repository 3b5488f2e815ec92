// DeviceMesh at world sizes 1-4: coordinates, per-dim groups, sub-meshes and
// flattening against the row-major layout worked out by hand; bad shapes and names.
#include "dtr/mesh/device_mesh.h"
#include "tests/support/mpi_test_util.h"

#include <catch2/catch.hpp>

using namespace dtr;
using dtr::mesh::DeviceMesh;
using dtr::mesh::init_device_mesh;
using dtr::testing::values_of;

namespace {

// Sum of `value(r)` over the ranks of `group`, computed through the group.
double group_sum(const mesh::ProcessGroupPtr& group, double mine) {
  Tensor t = full({1}, mine, {.dtype = DType::f64});
  group->all_reduce(t)->wait();
  return values_of(t)[0];
}

}  // namespace

TEST_CASE("a 1-D mesh over the world: coordinate is the rank, its group is the world") {
  const int n = distributed::world_size(), me = distributed::rank();
  auto mesh = init_device_mesh(DeviceType::cpu, {n}, {"dp"});
  REQUIRE(mesh.ndim() == 1);
  REQUIRE(mesh.size() == n);
  REQUIRE(mesh.coordinate("dp") == me);
  REQUIRE(mesh.group("dp")->size() == n);
  REQUIRE(group_sum(mesh.group(0), me + 1) == n * (n + 1) / 2);
  REQUIRE(mesh.to_string().find("dp=") != std::string::npos);
}

TEST_CASE("a (1, N) mesh has a group of one rank and a group of N") {
  const int n = distributed::world_size(), me = distributed::rank();
  auto mesh = init_device_mesh(DeviceType::cpu, {1, n}, {"replicate", "shard"});
  REQUIRE(mesh.coordinate() == std::vector<int64_t>{0, me});
  REQUIRE(mesh.group("replicate")->size() == 1);
  REQUIRE(mesh.group("shard")->global_ranks().size() == static_cast<size_t>(n));
  REQUIRE(group_sum(mesh.group("replicate"), me) == me);
}

TEST_CASE("a 2x2 mesh at 4 ranks: row-major coordinates, per-dim groups, sub-meshes, flatten", "[.np4]") {
  testing::require_four_ranks();
  const int me = distributed::rank();
  auto mesh = init_device_mesh(DeviceType::cpu, {2, 2}, {"replicate", "shard"});
  REQUIRE(mesh.coordinate() == std::vector<int64_t>{me / 2, me % 2});
  // Shard groups {0,1} and {2,3}; replicate groups {0,2} and {1,3}.
  const std::vector<int> shard_ranks = {2 * (me / 2), 2 * (me / 2) + 1};
  const std::vector<int> replicate_ranks = {me % 2, me % 2 + 2};
  REQUIRE(mesh.group("shard")->global_ranks() == shard_ranks);
  REQUIRE(mesh.group("replicate")->global_ranks() == replicate_ranks);
  REQUIRE(mesh.group("shard")->rank() == me % 2);
  REQUIRE(mesh.group("replicate")->rank() == me / 2);
  REQUIRE(group_sum(mesh.group("shard"), me) == shard_ranks[0] + shard_ranks[1]);
  REQUIRE(group_sum(mesh.group("replicate"), me) == replicate_ranks[0] + replicate_ranks[1]);

  DeviceMesh shard = mesh["shard"];
  REQUIRE(shard.ndim() == 1);
  REQUIRE(shard.ranks() == shard_ranks);
  REQUIRE(shard.coordinate(0) == me % 2);
  REQUIRE(shard.group(0) == mesh.group("shard"));  // shared, not a new group
  REQUIRE(mesh["replicate"].ranks() == replicate_ranks);
  REQUIRE(mesh[std::vector<std::string>{"replicate", "shard"}] == mesh);

  DeviceMesh flat = mesh.flatten("dp");
  REQUIRE(flat.shape() == std::vector<int64_t>{4});
  REQUIRE(flat.coordinate(0) == me);
  REQUIRE(flat.group(0)->global_ranks() == std::vector<int>{0, 1, 2, 3});
  REQUIRE(group_sum(flat.group(0), 1) == 4);
  // Flattening a sub-mesh gives a group over that sub-mesh only.
  DeviceMesh flat_shard = shard.flatten("shard_flat");
  REQUIRE(flat_shard.group(0)->global_ranks() == shard_ranks);
}

TEST_CASE("a 3-D (2, 1, 2) mesh at 4 ranks: flattening two outer dims groups ranks that share the middle", "[.np4]") {
  testing::require_four_ranks();
  const int me = distributed::rank();
  auto mesh = init_device_mesh(DeviceType::cpu, {2, 1, 2}, {"a", "b", "c"});
  REQUIRE(mesh.coordinate() == std::vector<int64_t>{me / 2, 0, me % 2});
  DeviceMesh ac = mesh[std::vector<std::string>{"a", "c"}];
  REQUIRE(ac.shape() == std::vector<int64_t>{2, 2});
  REQUIRE(ac.ranks() == std::vector<int>{0, 1, 2, 3});
  DeviceMesh flat = ac.flatten("ac");
  REQUIRE(flat.coordinate(0) == me);
  REQUIRE(group_sum(flat.group(0), me) == 6);
  DeviceMesh bc = mesh[std::vector<std::string>{"b", "c"}];
  REQUIRE(bc.ranks() == std::vector<int>{2 * (me / 2), 2 * (me / 2) + 1});
}

TEST_CASE("join orders the dims of one mesh as asked and remaining_dims gives the dims left out", "[.np4]") {
  testing::require_four_ranks();
  const int me = distributed::rank();
  auto mesh = init_device_mesh(DeviceType::cpu, {2, 2}, {"dp", "tp"});
  // (tp, dp): rank (dp d, tp t) = 2d + t sits at (t, d); row-major over (tp, dp) the ranks are 0, 2, 1, 3.
  DeviceMesh tp_dp = join(mesh["tp"], mesh["dp"]);
  REQUIRE(tp_dp.dim_names() == std::vector<std::string>{"tp", "dp"});
  REQUIRE(tp_dp.shape() == std::vector<int64_t>{2, 2});
  REQUIRE(tp_dp.coordinate() == std::vector<int64_t>{me % 2, me / 2});
  REQUIRE(tp_dp.ranks() == std::vector<int>{0, 2, 1, 3});
  REQUIRE(tp_dp.group("tp") == mesh.group("tp"));
  REQUIRE(join(mesh["dp"], mesh["tp"]) == mesh);
  REQUIRE(join(DeviceMesh(), mesh["dp"]) == mesh["dp"]);
  REQUIRE(mesh["dp"].remaining_dims() == mesh["tp"]);
  REQUIRE_FALSE(mesh.remaining_dims().defined());
  REQUIRE_FALSE(mesh.flatten("all").remaining_dims().defined());
  // Ranks of a 3-D mesh in a new order, the dim left out at this rank's coordinate.
  auto cube = init_device_mesh(DeviceType::cpu, {2, 1, 2}, {"a", "b", "c"});
  DeviceMesh ca = join(cube["c"], cube["a"]);
  REQUIRE(ca.ranks() == std::vector<int>{0, 2, 1, 3});
  REQUIRE(cube[std::vector<std::string>{"a", "c"}].remaining_dims() == cube["b"]);
  REQUIRE(join(ca, cube["b"]).shape() == std::vector<int64_t>{2, 2, 1});
  // Not dims of one mesh, the same dim twice, a flattened mesh.
  auto other = init_device_mesh(DeviceType::cpu, {4}, {"x"});
  REQUIRE_THROWS_WITH(join(mesh["tp"], other), Catch::Contains("must be different dims of one mesh"));
  REQUIRE_THROWS_WITH(join(mesh["tp"], mesh), Catch::Contains("must be different dims of one mesh"));
  REQUIRE_THROWS_WITH(join(mesh["tp"], mesh["dp"].flatten("f")), Catch::Contains("not flattened"));
}

TEST_CASE("bad meshes are errors on every rank: wrong product, non-positive or duplicate dims") {
  const int n = distributed::world_size();
  REQUIRE_THROWS_WITH(init_device_mesh(DeviceType::cpu, {n + 1}),
                      Catch::Contains("has " + std::to_string(n + 1) + " ranks but the world has"));
  REQUIRE_THROWS_WITH(init_device_mesh(DeviceType::cpu, {n, 0}), Catch::Contains("must be positive"));
  REQUIRE_THROWS_WITH(init_device_mesh(DeviceType::cpu, {1, n}, {"x", "x"}), Catch::Contains("distinct"));
  REQUIRE_THROWS_WITH(init_device_mesh(DeviceType::cpu, {1, n}, {"x"}), Catch::Contains("dim names"));
  auto mesh = init_device_mesh(DeviceType::cpu, {1, n}, {"replicate", "shard"});
  REQUIRE_THROWS_WITH(mesh["tp"], Catch::Contains("no dim named 'tp'") && Catch::Contains("replicate, shard"));
  REQUIRE_THROWS_WITH((mesh[std::vector<std::string>{"shard", "replicate"}]), Catch::Contains("mesh's order"));
}

TEST_CASE("ranks asking for different meshes get an error, not a hang") {
  const int n = distributed::world_size();
  if (n < 2) return;
  std::vector<std::string> names = {distributed::rank() == 0 ? "dp" : "fsdp"};
  REQUIRE_THROWS_WITH(init_device_mesh(DeviceType::cpu, {n}, names), Catch::Contains("asked for different meshes"));
}

TEST_CASE("on one host every rank is on host 0, and init_hsdp_mesh is (1, world size)") {
  if (distributed::num_hosts() > 1) {
    WARN("several hosts: tests/mesh/topology_probe.cpp checks the hosts there");
    return;
  }
  const int n = distributed::world_size();
  for (int r = 0; r < n; ++r) REQUIRE(distributed::host_of(r) == 0);
  CHECK_FALSE(distributed::host_name(0).empty());
  CHECK_THROWS_WITH(distributed::host_of(n), Catch::Contains(fmt::format("rank {} is not in [0, {})", n, n)));
  CHECK_THROWS_WITH(distributed::host_name(1), Catch::Contains("host 1 is not in [0, 1)"));
  const mesh::DeviceMesh hsdp = mesh::init_hsdp_mesh(DeviceType::cpu);
  REQUIRE(hsdp.shape() == std::vector<int64_t>{1, n});
  REQUIRE(hsdp.dim_names() == std::vector<std::string>{"replicate", "shard"});
  CHECK(hsdp.group("shard")->size() == n);
  CHECK(hsdp.group("replicate")->size() == 1);
  // With tensor parallelism: (1, n / 2, 2), each tp group two consecutive ranks.
  if (n % 2 == 0) {
    const mesh::DeviceMesh with_tp = mesh::init_hsdp_mesh(DeviceType::cpu, 2);
    REQUIRE(with_tp.shape() == std::vector<int64_t>{1, n / 2, 2});
    REQUIRE(with_tp.dim_names() == std::vector<std::string>{"replicate", "shard", "tp"});
    const int me = distributed::rank();
    CHECK(with_tp.group("tp")->global_ranks() == std::vector<int>{me - me % 2, me - me % 2 + 1});
  }
  CHECK_THROWS_WITH(mesh::init_hsdp_mesh(DeviceType::cpu, n + 1),
                    Catch::Contains(fmt::format("does not divide the {} ranks per host", n)));
}
