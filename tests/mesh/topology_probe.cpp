// Run across the simulated cluster by tests/mesh/topology_test.sh: checks what
// the ranks learn about their hosts (distributed::num_hosts, host_of, host_name)
// against how mpirun placed them, and the HSDP mesh built from it.
//   topology_probe HOSTS blocks        ranks fill one host after another (--map-by slot):
//                                      host_of(r) = r / (ranks per host); the shard
//                                      groups of init_hsdp_mesh lie within a host
//   topology_probe HOSTS round-robin   ranks dealt to hosts in turn (--map-by node):
//                                      host_of(r) = r % HOSTS; init_hsdp_mesh refuses
//                                      the layout; a (2, N/2) mesh is built anyway (its
//                                      warning is checked by the script)
// Prints "PASS ..." on rank 0, or a FAIL line and exits 1 on the rank that found it.
#include "dtr/mesh/device_mesh.h"
#include "dtr/mesh/distributed.h"
#include "dtr/tensor/factory.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <set>
#include <string>

using namespace dtr;

namespace {

void require(bool ok, const std::string& what) {
  if (ok) return;
  fmt::print(stderr, "FAIL (rank {}): {}\n", distributed::rank(), what);
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  distributed::init();
  require(argc == 3, "usage: topology_probe HOSTS blocks|round-robin");
  const int hosts = std::atoi(argv[1]);
  const std::string mode = argv[2];
  const int rank = distributed::rank(), world = distributed::world_size(), per_host = world / hosts;
  char own[256] = {};
  gethostname(own, sizeof own - 1);

  require(distributed::num_hosts() == hosts, fmt::format("num_hosts() is {}, expected {}", distributed::num_hosts(), hosts));
  std::set<std::string> names;
  for (int h = 0; h < hosts; ++h) names.insert(distributed::host_name(h));
  require(static_cast<int>(names.size()) == hosts, "the hosts' names are not distinct");
  require(distributed::host_name(distributed::host_of(rank)) == own,
          fmt::format("host_name(host_of({})) is '{}', but this rank runs on '{}'", rank,
                      distributed::host_name(distributed::host_of(rank)), own));
  for (int r = 0; r < world; ++r) {
    const int want = mode == "blocks" ? r / per_host : r % hosts;
    require(distributed::host_of(r) == want, fmt::format("host_of({}) is {}, expected {} ({} placement)", r,
                                                         distributed::host_of(r), want, mode));
  }
  require(distributed::local_world_size() == per_host,
          fmt::format("local_world_size() is {}, expected {}", distributed::local_world_size(), per_host));

  if (mode == "blocks") {
    const mesh::DeviceMesh mesh = mesh::init_hsdp_mesh(DeviceType::cpu);
    require(mesh.shape() == std::vector<int64_t>{hosts, per_host}, "init_hsdp_mesh: shape is not (hosts, ranks per host)");
    require(mesh.dim_names() == std::vector<std::string>{"replicate", "shard"}, "init_hsdp_mesh: dim names");
    // Every member of this rank's shard group is on this rank's host.
    const auto& shard = mesh.group("shard");
    Tensor mine = full({1}, distributed::host_of(rank), {.dtype = DType::i32});
    Tensor all = empty({shard->size()}, {.dtype = DType::i32});
    shard->all_gather_into_tensor(all, mine)->wait();
    for (int32_t h : all.to_vector<int32_t>()) {
      require(h == distributed::host_of(rank), "a shard group of init_hsdp_mesh spans hosts");
    }
  } else {
    bool refused = false;
    try {
      mesh::init_hsdp_mesh(DeviceType::cpu);
    } catch (const std::exception& e) {
      refused = std::string(e.what()).find("consecutive ranks") != std::string::npos;
      if (rank == 0) fmt::print("init_hsdp_mesh refused: {}\n", e.what());
    }
    require(refused, "init_hsdp_mesh accepted ranks dealt round-robin to the hosts");
    mesh::init_device_mesh(DeviceType::cpu, {2, world / 2}, {"replicate", "shard"});  // warns on rank 0
  }
  if (rank == 0) fmt::print("PASS: {} ranks on {} hosts ({}) as placed\n", world, hosts, mode);
  std::fflush(stdout);
  distributed::finalize();
  return 0;
}
