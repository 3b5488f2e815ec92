// DeviceMesh: the ranks of the job arranged as an N-D array with named dims, and
// one ProcessGroup per dim (the ranks that differ from this one only along that
// dim). Same layout as PyTorch: the mesh is arange(world_size) viewed row-major as
// `shape`, so on a (2, 2) mesh ("replicate", "shard") ranks {0, 1} and {2, 3}
// share a shard group and {0, 2} and {1, 3} a replicate group.
//
//   auto mesh = dtr::mesh::init_device_mesh(DeviceType::cpu, {2, 2}, {"replicate", "shard"});
//   mesh.group("shard")->all_gather_into_tensor(out, in);
//   DeviceMesh shard_mesh = mesh["shard"];             // 1-D sub-mesh
//   DeviceMesh flat = mesh.flatten("dp");              // 1-D mesh over all 4 ranks
//
// Creating a mesh, and flatten(), are collective over the world: every rank calls
// them with the same arguments (checked: different arguments are an error on
// every rank, not a hang). Indexing a sub-mesh is local.
#pragma once

#include "dtr/mesh/process_group.h"
#include "dtr/tensor/device.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dtr::mesh {

class DeviceMesh {
 public:
  DeviceMesh() = default;  // an empty mesh; use init_device_mesh()

  bool defined() const { return state_ != nullptr; }
  DeviceType device_type() const;
  int ndim() const;
  const std::vector<int64_t>& shape() const;
  const std::vector<std::string>& dim_names() const;
  int64_t size() const;  // number of ranks in the mesh
  int64_t size(int dim) const;
  int64_t size(std::string_view dim_name) const;
  int dim_index(std::string_view dim_name) const;  // error naming the known dims

  // World ranks of the mesh in row-major order.
  const std::vector<int>& ranks() const;
  // This rank's coordinate, one entry per dim.
  const std::vector<int64_t>& coordinate() const;
  int64_t coordinate(int dim) const;  // PyTorch's get_local_rank(dim)
  int64_t coordinate(std::string_view dim_name) const;

  const ProcessGroupPtr& group(int dim) const;
  const ProcessGroupPtr& group(std::string_view dim_name) const;

  // The sub-mesh of the named dims (in the given order of the parent's dims) that
  // contains this rank; shares the parent's groups. No communication.
  DeviceMesh operator[](std::string_view dim_name) const;
  DeviceMesh operator[](const std::vector<std::string>& dim_names) const;

  // A 1-D mesh named `name` over all ranks of this (sub-)mesh, with a new group.
  // Collective over the world.
  DeviceMesh flatten(std::string name) const;

  // The sub-mesh of the dims of the mesh this one was cut from that this one
  // lacks, in that mesh's order (on a (dp, tp) mesh, mesh["dp"] leaves (tp)); an
  // empty mesh when it lacks none, or when it is flattened (its one dim stands for
  // several). No communication.
  DeviceMesh remaining_dims() const;

  // "DeviceMesh(cpu, (replicate=2, shard=2), rank 3 at (1, 1))".
  std::string to_string() const;

  // Same ranks, shape, names and device type.
  bool operator==(const DeviceMesh& other) const;

  struct State;

 private:
  explicit DeviceMesh(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  const State& state() const;
  friend DeviceMesh init_device_mesh(DeviceType, std::vector<int64_t>, std::vector<std::string>);
  friend DeviceMesh join(const DeviceMesh&, const DeviceMesh&);

  std::shared_ptr<const State> state_;
};

// Collective over the world. dim_names may be empty (dims are then "dim0", ...).
// Errors: a shape whose product is not the world size, a non-positive size,
// duplicate names, a names list of the wrong length.
// A mesh of 2 or more dims whose innermost dim groups ranks of several hosts
// (distributed::host_of) gets a warning on rank 0 saying why it will be slow.
DeviceMesh init_device_mesh(DeviceType device_type, std::vector<int64_t> shape,
                            std::vector<std::string> dim_names = {});

// The mesh of `first`'s dims followed by `second`'s, both cut from one mesh, in
// that order whatever the mesh's own: on a (dp, tp) mesh, join(mesh["tp"],
// mesh["dp"]) is a (tp, dp) mesh, where a tensor sharded on dim 0 by both is
// chunked by tp first and each chunk by dp (FSDP over tensor-parallel shards).
// An empty mesh on either side gives the other. Shares the mesh's groups; no
// communication. Errors unless the two are different dims of one mesh.
DeviceMesh join(const DeviceMesh& first, const DeviceMesh& second);

// HSDP's mesh for the hosts of the job: (replicate = hosts, shard = ranks per
// host), named {"replicate", "shard"}, so that FSDP's all-gathers and
// reduce-scatters stay within a host and only the gradient all-reduce crosses
// hosts. One host gives (1, world size). Collective over the world; an error on
// every rank, saying why, when the hosts do not hold equal blocks of consecutive
// ranks. With `tp` > 1, HSDP over tensor parallelism: (replicate = hosts,
// shard = ranks per host / tp, tp), named {"replicate", "shard", "tp"}, each
// tensor-parallel group `tp` consecutive ranks of one host (an error when tp does
// not divide the ranks per host).
DeviceMesh init_hsdp_mesh(DeviceType device_type, int64_t tp = 1);

}  // namespace dtr::mesh
