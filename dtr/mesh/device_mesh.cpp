#include "dtr/mesh/device_mesh.h"

#include "dtr/base/error.h"
#include "dtr/base/log.h"
#include "dtr/mesh/distributed.h"
#include "dtr/tensor/factory.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <set>

namespace dtr::mesh {

struct DeviceMesh::State {
  DeviceType device_type = DeviceType::cpu;
  std::vector<int64_t> shape;
  std::vector<std::string> names;
  std::vector<int> ranks;  // world ranks, row-major over `shape`
  std::vector<int64_t> coordinate;
  std::vector<ProcessGroupPtr> groups;
  // Where the mesh sits in the root mesh it was cut from (for flatten): the root's
  // shape and this rank's coordinate there, and which root dims this mesh spans.
  std::vector<int64_t> root_shape;
  std::vector<int64_t> root_coordinate;
  std::vector<int> root_dims;
  ProcessGroupPtr world;
  // The mesh init_device_mesh made, whose dims this one's are (null for that mesh
  // itself). A flattened mesh has one dim that is none of them.
  std::shared_ptr<const State> root;
  bool flattened = false;
};

namespace {

int64_t product(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{1}, std::multiplies<>());
}

std::vector<int64_t> unravel(int64_t index, const std::vector<int64_t>& shape) {
  std::vector<int64_t> coordinate(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    coordinate[d] = index % shape[d];
    index /= shape[d];
  }
  return coordinate;
}

// Row-major linear index of `coordinate` restricted to `dims` (in that order).
int64_t linear_index(const std::vector<int64_t>& coordinate, const std::vector<int64_t>& shape,
                     const std::vector<int>& dims) {
  int64_t index = 0;
  for (int d : dims) index = index * shape[d] + coordinate[d];
  return index;
}

std::vector<int> all_dims_except(size_t ndim, const std::vector<int>& excluded) {
  std::vector<int> dims;
  for (int d = 0; d < static_cast<int>(ndim); ++d) {
    if (std::find(excluded.begin(), excluded.end(), d) == excluded.end()) dims.push_back(d);
  }
  return dims;
}

std::string mesh_text(DeviceType type, const std::vector<int64_t>& shape, const std::vector<std::string>& names) {
  std::vector<std::string> dims;
  for (size_t d = 0; d < shape.size(); ++d) {
    dims.push_back(d < names.size() ? fmt::format("{}={}", names[d], shape[d]) : std::to_string(shape[d]));
  }
  return fmt::format("{}, ({})", Device{type, 0}.str(), fmt::join(dims, ", "));
}

// Every rank must ask for the same mesh; otherwise the group splits below would
// pair up wrongly or hang. One small all-gather settles it.
void check_same_on_all_ranks(DeviceType type, const std::vector<int64_t>& shape,
                             const std::vector<std::string>& names) {
  auto world = distributed::world_group(DeviceType::cpu);
  const std::string text = mesh_text(type, shape, names);
  const int64_t mine = static_cast<int64_t>(std::hash<std::string>{}(text) & 0x7fffffffffffffffULL);
  Tensor in = full({1}, mine, {.dtype = DType::i64, .device = Device::cpu()});
  Tensor all = empty({world->size()}, {.dtype = DType::i64, .device = Device::cpu()});
  world->all_gather_into_tensor(all, in)->wait();
  auto hashes = all.to_vector<int64_t>();
  for (int r = 0; r < world->size(); ++r) {
    DTR_CHECK(hashes[r] == mine,
              "init_device_mesh: the ranks asked for different meshes: rank {} asked for ({}) but rank {} asked "
              "for something else; every rank must pass the same device type, shape and names",
              world->rank(), text, r);
  }
}

// "a (ranks 0-1), b (ranks 2-3)": the hosts of `ranks` with their ranks.
std::string hosts_text(int64_t first, int64_t last) {
  std::vector<std::string> parts;
  int64_t start = first;
  for (int64_t r = first; r <= last; ++r) {
    if (r == last || distributed::host_of(static_cast<int>(r + 1)) != distributed::host_of(static_cast<int>(r))) {
      parts.push_back(fmt::format("{} (ranks {}-{})", distributed::host_name(distributed::host_of(static_cast<int>(r))),
                                  start, r));
      start = r + 1;
    }
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

// Why the hosts cannot form a (replicate = hosts, shard = ranks per host) mesh, or "".
std::string hsdp_layout_problem() {
  const int hosts = distributed::num_hosts(), world = distributed::world_size();
  if (world % hosts != 0) return fmt::format("{} ranks do not split evenly over {} hosts", world, hosts);
  const int per_host = world / hosts;
  for (int r = 0; r < world; ++r) {
    if (distributed::host_of(r) != r / per_host) {
      return fmt::format("rank {} is on host {} ({}), not on host {} as {} ranks per host in blocks would put it", r,
                         distributed::host_of(r), distributed::host_name(distributed::host_of(r)), r / per_host,
                         per_host);
    }
  }
  return "";
}

// A mesh of 2 or more dims whose innermost dim (the shard dim of HSDP, the
// tensor-parallel dim) groups ranks of several hosts sends its most frequent
// collectives over the link between hosts, the slowest one. Rank 0 says so.
void warn_if_inner_dim_spans_hosts(const std::vector<int64_t>& shape, const std::vector<std::string>& names) {
  if (shape.size() < 2 || distributed::rank() != 0 || distributed::num_hosts() < 2) return;
  const int64_t inner = shape.back();
  for (int64_t start = 0; start < product(shape); start += inner) {
    const int64_t last = start + inner - 1;
    bool one_host = true;
    for (int64_t r = start + 1; r <= last; ++r) {
      one_host = one_host && distributed::host_of(static_cast<int>(r)) == distributed::host_of(static_cast<int>(start));
    }
    if (one_host) continue;
    const std::string layout = hsdp_layout_problem();
    DTR_LOG_WARN(
        "init_device_mesh: the groups of mesh dim '{}' (size {}) span hosts: ranks {}-{} are on {}. Its "
        "collectives (FSDP's all-gather and reduce-scatter of every layer) then cross the link between hosts, "
        "the slowest one, and the step will be slow. {}",
        names.back(), inner, start, last, hosts_text(start, last),
        layout.empty() ? fmt::format("A ({}, {}) mesh keeps them within a host: mesh::init_hsdp_mesh() builds it.",
                                     distributed::num_hosts(), distributed::world_size() / distributed::num_hosts())
                       : fmt::format("The hosts do not hold equal blocks of consecutive ranks ({}).", layout));
    return;
  }
}

}  // namespace

DeviceMesh init_device_mesh(DeviceType device_type, std::vector<int64_t> shape, std::vector<std::string> dim_names) {
  distributed::ensure_initialized("dtr::mesh::init_device_mesh");
  check_same_on_all_ranks(device_type, shape, dim_names);
  auto world = distributed::world_group(device_type);
  const int rank = distributed::rank();
  DTR_CHECK(!shape.empty(), "init_device_mesh: expected a mesh shape with at least one dim, got [] (rank {})", rank);
  for (int64_t s : shape) {
    DTR_CHECK(s > 0, "init_device_mesh: every mesh dim must be positive, got shape [{}] (rank {})",
              fmt::join(shape, ", "), rank);
  }
  DTR_CHECK(product(shape) == world->size(),
            "init_device_mesh: mesh shape [{}] has {} ranks but the world has {} ranks (rank {})",
            fmt::join(shape, ", "), product(shape), world->size(), rank);
  if (dim_names.empty()) {
    for (size_t d = 0; d < shape.size(); ++d) dim_names.push_back(fmt::format("dim{}", d));
  }
  DTR_CHECK(dim_names.size() == shape.size(),
            "init_device_mesh: {} dim names [{}] for a mesh of {} dims [{}] (rank {})", dim_names.size(),
            fmt::join(dim_names, ", "), shape.size(), fmt::join(shape, ", "), rank);
  std::set<std::string> unique(dim_names.begin(), dim_names.end());
  DTR_CHECK(unique.size() == dim_names.size() && !unique.contains(""),
            "init_device_mesh: dim names must be distinct and non-empty, got [{}] (rank {})",
            fmt::join(dim_names, ", "), rank);

  auto state = std::make_shared<DeviceMesh::State>();
  state->device_type = device_type;
  state->shape = shape;
  state->names = dim_names;
  state->ranks.resize(world->size());
  std::iota(state->ranks.begin(), state->ranks.end(), 0);
  state->coordinate = unravel(world->rank(), shape);
  state->root_shape = shape;
  state->root_coordinate = state->coordinate;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) state->root_dims.push_back(d);
  state->world = world;
  const std::string text = mesh_text(device_type, shape, dim_names);
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
    int64_t color = linear_index(state->coordinate, shape, all_dims_except(shape.size(), {d}));
    auto group = world->split(static_cast<int>(color), static_cast<int>(state->coordinate[d]),
                              fmt::format("{} of mesh ({})", dim_names[d], text));
    DTR_INTERNAL_ASSERT(group && group->size() == shape[d], "mesh dim {} group has the wrong size", dim_names[d]);
    state->groups.push_back(std::move(group));
  }
  warn_if_inner_dim_spans_hosts(shape, dim_names);
  return DeviceMesh(std::move(state));
}

DeviceMesh init_hsdp_mesh(DeviceType device_type, int64_t tp) {
  distributed::ensure_initialized("dtr::mesh::init_hsdp_mesh");
  const std::string problem = hsdp_layout_problem();
  DTR_CHECK(problem.empty(),
            "init_hsdp_mesh: a (replicate = hosts, shard = ranks per host) mesh needs each host to hold an equal "
            "block of consecutive ranks; here {}. Launch with one block per host (Open MPI's default with a "
            "hostfile, --map-by slot) (rank {})",
            problem, distributed::rank());
  const int64_t hosts = distributed::num_hosts(), per_host = distributed::world_size() / hosts;
  if (tp == 1) return init_device_mesh(device_type, {hosts, per_host}, {"replicate", "shard"});
  DTR_CHECK(tp > 0 && per_host % tp == 0,
            "init_hsdp_mesh: tensor parallelism over {} ranks stays within a host, and it does not divide the {} "
            "ranks per host (rank {})",
            tp, per_host, distributed::rank());
  return init_device_mesh(device_type, {hosts, per_host / tp, tp}, {"replicate", "shard", "tp"});
}

const DeviceMesh::State& DeviceMesh::state() const {
  DTR_CHECK(state_ != nullptr, "DeviceMesh: this mesh is empty; create one with init_device_mesh()");
  return *state_;
}

DeviceType DeviceMesh::device_type() const { return state().device_type; }
int DeviceMesh::ndim() const { return static_cast<int>(state().shape.size()); }
const std::vector<int64_t>& DeviceMesh::shape() const { return state().shape; }
const std::vector<std::string>& DeviceMesh::dim_names() const { return state().names; }
int64_t DeviceMesh::size() const { return product(state().shape); }

int64_t DeviceMesh::size(int dim) const {
  DTR_CHECK(dim >= 0 && dim < ndim(), "DeviceMesh::size: dim {} out of range for a {}-D mesh", dim, ndim());
  return state().shape[dim];
}
int64_t DeviceMesh::size(std::string_view dim_name) const { return size(dim_index(dim_name)); }

int DeviceMesh::dim_index(std::string_view dim_name) const {
  const auto& names = state().names;
  auto it = std::find(names.begin(), names.end(), dim_name);
  DTR_CHECK(it != names.end(), "DeviceMesh: no dim named '{}'; the mesh's dims are [{}]", dim_name,
            fmt::join(names, ", "));
  return static_cast<int>(it - names.begin());
}

const std::vector<int>& DeviceMesh::ranks() const { return state().ranks; }
const std::vector<int64_t>& DeviceMesh::coordinate() const { return state().coordinate; }

int64_t DeviceMesh::coordinate(int dim) const {
  DTR_CHECK(dim >= 0 && dim < ndim(), "DeviceMesh::coordinate: dim {} out of range for a {}-D mesh", dim, ndim());
  return state().coordinate[dim];
}
int64_t DeviceMesh::coordinate(std::string_view dim_name) const { return coordinate(dim_index(dim_name)); }

const ProcessGroupPtr& DeviceMesh::group(int dim) const {
  DTR_CHECK(dim >= 0 && dim < ndim(), "DeviceMesh::group: dim {} out of range for a {}-D mesh", dim, ndim());
  return state().groups[dim];
}
const ProcessGroupPtr& DeviceMesh::group(std::string_view dim_name) const { return group(dim_index(dim_name)); }

namespace {

// The mesh of `root`'s dims `dims`, in that order, that contains this rank.
std::shared_ptr<const DeviceMesh::State> cut(const std::shared_ptr<const DeviceMesh::State>& root,
                                             const std::vector<int>& dims) {
  auto sub = std::make_shared<DeviceMesh::State>();
  sub->device_type = root->device_type;
  sub->root_shape = root->shape;
  sub->root_coordinate = root->coordinate;
  sub->world = root->world;
  sub->root = root;
  for (int d : dims) {
    sub->shape.push_back(root->shape[d]);
    sub->names.push_back(root->names[d]);
    sub->coordinate.push_back(root->coordinate[d]);
    sub->groups.push_back(root->groups[d]);
    sub->root_dims.push_back(d);
  }
  // Row-major over the dims in the given order; the others at this rank's coordinate.
  std::vector<int> every(root->shape.size());
  std::iota(every.begin(), every.end(), 0);
  for (int64_t i = 0; i < product(sub->shape); ++i) {
    const std::vector<int64_t> c = unravel(i, sub->shape);
    std::vector<int64_t> at = root->coordinate;
    for (size_t j = 0; j < dims.size(); ++j) at[dims[j]] = c[j];
    sub->ranks.push_back(root->ranks[linear_index(at, root->shape, every)]);
  }
  return sub;
}

// The mesh `s` is cut from; null for such a mesh itself and for flattened meshes.
std::shared_ptr<const DeviceMesh::State> root_of(const DeviceMesh::State& s) {
  return s.flattened ? nullptr : s.root;
}

}  // namespace

DeviceMesh DeviceMesh::operator[](std::string_view dim_name) const {
  return (*this)[std::vector<std::string>{std::string(dim_name)}];
}

DeviceMesh DeviceMesh::operator[](const std::vector<std::string>& dim_names) const {
  const State& parent = state();
  DTR_CHECK(!dim_names.empty(), "DeviceMesh[]: expected at least one dim name; the mesh's dims are [{}]",
            fmt::join(parent.names, ", "));
  std::vector<int> dims;
  for (const auto& name : dim_names) {
    int d = dim_index(name);
    DTR_CHECK(dims.empty() || d > dims.back(),
              "DeviceMesh[]: dims [{}] must be distinct and in the mesh's order [{}]", fmt::join(dim_names, ", "),
              fmt::join(parent.names, ", "));
    dims.push_back(d);
  }
  // A flattened mesh has one dim, not one of its root's: its sub-mesh is itself.
  if (parent.flattened) return *this;
  std::vector<int> root_dims;
  for (int d : dims) root_dims.push_back(parent.root_dims[d]);
  return DeviceMesh(cut(parent.root ? parent.root : state_, root_dims));
}

DeviceMesh DeviceMesh::flatten(std::string name) const {
  const State& s = state();
  DTR_CHECK(!name.empty(), "DeviceMesh::flatten: the flattened dim needs a name");
  const int64_t color = linear_index(s.root_coordinate, s.root_shape, all_dims_except(s.root_shape.size(), s.root_dims));
  const int64_t key = linear_index(s.coordinate, s.shape, [&] {
    std::vector<int> dims(s.shape.size());
    std::iota(dims.begin(), dims.end(), 0);
    return dims;
  }());
  auto group = s.world->split(static_cast<int>(color), static_cast<int>(key),
                              fmt::format("{} (flattened {})", name, fmt::join(s.names, "*")));
  DTR_INTERNAL_ASSERT(group && group->size() == size(), "flattened group has the wrong size");
  auto flat = std::make_shared<State>();
  flat->device_type = s.device_type;
  flat->shape = {size()};
  flat->names = {std::move(name)};
  flat->ranks = s.ranks;
  flat->coordinate = {key};
  flat->groups = {std::move(group)};
  flat->root_shape = s.root_shape;
  flat->root_coordinate = s.root_coordinate;
  flat->root_dims = s.root_dims;
  flat->world = s.world;
  flat->flattened = true;
  return DeviceMesh(std::move(flat));
}

DeviceMesh join(const DeviceMesh& first, const DeviceMesh& second) {
  if (!first.defined()) return second;
  if (!second.defined()) return first;
  const auto root = root_of(first.state());
  std::vector<int> dims = first.state().root_dims;
  const auto& more = second.state().root_dims;
  const bool disjoint = std::none_of(more.begin(), more.end(), [&](int d) {
    return std::find(dims.begin(), dims.end(), d) != dims.end();
  });
  DTR_CHECK(root != nullptr && root == root_of(second.state()) && disjoint,
            "mesh::join: {} and {} must be different dims of one mesh made by init_device_mesh (as mesh[\"tp\"] and "
            "mesh[\"dp\"] are), not flattened (rank {})",
            first.to_string(), second.to_string(), distributed::rank());
  dims.insert(dims.end(), more.begin(), more.end());
  return DeviceMesh(cut(root, dims));
}

DeviceMesh DeviceMesh::remaining_dims() const {
  const auto root = root_of(state());
  if (root == nullptr) return DeviceMesh();
  std::vector<int> dims;
  for (int d = 0; d < static_cast<int>(root->shape.size()); ++d) {
    if (std::find(state_->root_dims.begin(), state_->root_dims.end(), d) == state_->root_dims.end()) dims.push_back(d);
  }
  if (dims.empty()) return DeviceMesh();
  return DeviceMesh(cut(root, dims));
}

std::string DeviceMesh::to_string() const {
  if (!state_) return "DeviceMesh(empty)";
  return fmt::format("DeviceMesh({}, rank {} at ({}))", mesh_text(state_->device_type, state_->shape, state_->names),
                     state_->world->rank(), fmt::join(state_->coordinate, ", "));
}

bool DeviceMesh::operator==(const DeviceMesh& other) const {
  if (state_ == other.state_) return true;
  if (!state_ || !other.state_) return false;
  return state_->device_type == other.state_->device_type && state_->shape == other.state_->shape &&
         state_->names == other.state_->names && state_->ranks == other.state_->ranks;
}

}  // namespace dtr::mesh
