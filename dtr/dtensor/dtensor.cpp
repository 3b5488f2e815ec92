#include "dtr/dtensor/dtensor.h"

#include "dtr/base/error.h"
#include "dtr/dtensor/redistribute.h"
#include "dtr/mesh/debug_collectives.h"
#include "dtr/mesh/distributed.h"
#include "dtr/tensor/factory.h"

namespace dtr {

namespace {

Shape infer_global_shape(const Tensor& local, const mesh::DeviceMesh& mesh, const Placements& placements) {
  Shape shape = local.sizes();
  for (size_t i = 0; i < placements.size(); ++i) {
    if (!placements[i].is_shard()) continue;
    int64_t d = placements[i].dim();
    if (d < 0) d += local.dim();
    DTR_CHECK(d >= 0 && d < local.dim(), "DTensor::from_local: {} is out of range for a local tensor of shape {}",
              placements[i].to_string(), shape_str(local.sizes()));
    shape[d] *= mesh.size(static_cast<int>(i));
  }
  return shape;
}

// Every rank's local shape must be what the spec gives for its coordinate.
void check_local_shapes(const Tensor& local, const DTensorSpec& spec) {
  auto world = distributed::world_group(DeviceType::cpu);
  const int64_t ndim = local.dim();
  Tensor mine = from_vector<int64_t>(local.sizes(), {ndim});
  Tensor all = dtr::empty({world->size() * ndim}, {.dtype = DType::i64, .device = Device::cpu()});
  world->all_gather_into_tensor(all, mine)->wait();
  auto shapes = all.to_vector<int64_t>();
  const auto& ranks = spec.mesh.ranks();
  std::vector<std::string> problems;
  for (size_t i = 0; i < ranks.size(); ++i) {
    std::vector<int64_t> coordinate(spec.mesh.ndim());
    int64_t index = static_cast<int64_t>(i);
    for (int d = spec.mesh.ndim() - 1; d >= 0; --d) {
      coordinate[d] = index % spec.mesh.size(d);
      index /= spec.mesh.size(d);
    }
    Shape expected = spec.local_shape(coordinate);
    Shape got(shapes.begin() + ranks[i] * ndim, shapes.begin() + (ranks[i] + 1) * ndim);
    if (got != expected) {
      problems.push_back(fmt::format("rank {} has {}, expected {}", ranks[i], shape_str(got), shape_str(expected)));
    }
  }
  DTR_CHECK(problems.empty(), "DTensor::from_local: the local shapes do not fit {} over global shape {}: {}",
            to_string(spec.placements), shape_str(spec.shape), fmt::join(problems, "; "));
}

}  // namespace

DTensor::DTensor(Tensor local, DTensorSpec spec) : local_(std::move(local)), spec_(std::move(spec)) {
  DTR_CHECK(local_.defined(), "DTensor: the local tensor is undefined");
  DTR_CHECK(local_.dtype() == spec_.dtype, "DTensor: local dtype {} differs from the spec's {}", local_.dtype(),
            spec_.dtype);
  DTR_CHECK(local_.sizes() == spec_.local_shape(),
            "DTensor: local shape {} does not match {} on rank {} (expected {})", shape_str(local_.sizes()),
            spec_.to_string(), distributed::is_initialized() ? distributed::rank() : 0,
            shape_str(spec_.local_shape()));
}

DTensor DTensor::from_local(const Tensor& local, const mesh::DeviceMesh& mesh, Placements placements,
                            const FromLocalOptions& options) {
  DTR_CHECK(local.defined(), "DTensor::from_local: the local tensor is undefined");
  DTR_CHECK(static_cast<int>(placements.size()) == mesh.ndim(),
            "DTensor::from_local: expected one placement per mesh dim ({}), got {}", mesh.ndim(),
            dtr::to_string(placements));
  Shape shape = options.shape ? *options.shape : infer_global_shape(local, mesh, placements);
  DTensorSpec spec = DTensorSpec::make(mesh, std::move(placements), std::move(shape), local.dtype());
  if (options.run_check.value_or(mesh::debug_collectives())) check_local_shapes(local, spec);
  return DTensor(local, std::move(spec));
}

namespace {

DTensor make_filled(const Shape& shape, const mesh::DeviceMesh& mesh, Placements placements,
                    const TensorOptions& options, const std::function<Tensor(const Shape&)>& make) {
  DTensorSpec spec = DTensorSpec::make(mesh, std::move(placements), shape, options.dtype);
  Tensor local = make(spec.local_shape());
  return DTensor(std::move(local), std::move(spec));
}

}  // namespace

DTensor DTensor::empty(const Shape& shape, const mesh::DeviceMesh& mesh, Placements placements,
                       const TensorOptions& options) {
  return make_filled(shape, mesh, std::move(placements), options,
                     [&](const Shape& s) { return dtr::empty(s, options); });
}

DTensor DTensor::zeros(const Shape& shape, const mesh::DeviceMesh& mesh, Placements placements,
                       const TensorOptions& options) {
  return make_filled(shape, mesh, std::move(placements), options,
                     [&](const Shape& s) { return dtr::zeros(s, options); });
}

DTensor DTensor::ones(const Shape& shape, const mesh::DeviceMesh& mesh, Placements placements,
                      const TensorOptions& options) {
  DTensorSpec spec = DTensorSpec::make(mesh, std::move(placements), shape, options.dtype);
  if (!spec.has_partial()) return DTensor(dtr::ones(spec.local_shape(), options), std::move(spec));
  // A Partial(sum) of ones: each rank holds its share, as redistribute makes it.
  DTensorSpec replicated = spec.with_placements(Placements(mesh.ndim(), Replicate()));
  Tensor local = dtensor::redistribute_local(dtr::ones(spec.shape, options), replicated, spec);
  return DTensor(std::move(local), std::move(spec));
}

DTensor DTensor::rand(const Shape& shape, const mesh::DeviceMesh& mesh, Placements placements,
                      const TensorOptions& options, Generator* gen) {
  DTensor t = empty(shape, mesh, std::move(placements), options);
  t.uniform_(0, 1, gen);
  return t;
}

DTensor DTensor::randn(const Shape& shape, const mesh::DeviceMesh& mesh, Placements placements,
                       const TensorOptions& options, Generator* gen) {
  DTensor t = empty(shape, mesh, std::move(placements), options);
  t.normal_(0, 1, gen);
  return t;
}

namespace {

LogicalSlice global_box(const DTensorSpec& spec, std::string_view op) {
  DTR_CHECK(!spec.has_partial(), "DTensor::{}: cannot fill a DTensor with Partial placements {}", op,
            to_string(spec.placements));
  return LogicalSlice{.logical_shape = spec.shape, .offset = spec.local_offset()};
}

}  // namespace

const DTensor& DTensor::uniform_(double lo, double hi, Generator* gen) const {
  dtr::uniform_(local_, lo, hi, gen, global_box(spec_, "uniform_"));
  return *this;
}

const DTensor& DTensor::normal_(double mean, double std, Generator* gen) const {
  dtr::normal_(local_, mean, std, gen, global_box(spec_, "normal_"));
  return *this;
}

int64_t DTensor::size(int64_t dim) const {
  const int64_t n = spec_.ndim();
  DTR_CHECK(dim >= -n && dim < n, "DTensor::size: dim {} out of range for shape {}", dim, shape_str(spec_.shape));
  return spec_.shape[dim < 0 ? dim + n : dim];
}

DTensor DTensor::redistribute(Placements placements) const {
  DTR_CHECK(defined(), "DTensor::redistribute: the DTensor is undefined");
  DTensorSpec target = spec_.with_placements(std::move(placements));
  Tensor local = dtensor::redistribute_local(local_, spec_, target);
  return DTensor(std::move(local), std::move(target));
}

Tensor DTensor::full_tensor() const {
  return redistribute(Placements(spec_.mesh.ndim(), Replicate())).to_local();
}

const DTensor& DTensor::requires_grad_(bool on) const {
  local_.requires_grad_(on);
  return *this;
}

DTensor DTensor::grad() const {
  const Tensor& g = local_.grad();
  if (!g.defined()) return {};
  return DTensor(g, spec_.with_placements(dtensor::gradient_placements(spec_.placements)));
}

DTensor DTensor::detach() const { return DTensor(local_.detach(), spec_); }

std::string DTensor::to_string() const {
  if (!defined()) return "DTensor(undefined)";
  return fmt::format("DTensor(local {}, {})", shape_str(local_.sizes()), spec_.to_string());
}

DTensor distribute_tensor(const Tensor& full, const mesh::DeviceMesh& mesh, Placements placements,
                          std::optional<int> src_rank) {
  DTR_CHECK(full.defined(), "distribute_tensor: the tensor is undefined");
  Tensor source = full;
  if (src_rank) {
    auto world = distributed::world_group(full.device().type);
    DTR_CHECK(*src_rank >= 0 && *src_rank < world->size(), "distribute_tensor: src_rank {} is not a rank of the {} ranks",
              *src_rank, world->size());
    source = full.detach().contiguous().clone();
    world->broadcast(source, *src_rank)->wait();
  }
  DTensorSpec replicated =
      DTensorSpec::make(mesh, Placements(mesh.ndim(), Replicate()), full.sizes(), full.dtype());
  DTensorSpec target = replicated.with_placements(std::move(placements));
  Tensor local = dtensor::redistribute_local(source, replicated, target);
  return DTensor(std::move(local), std::move(target));
}

}  // namespace dtr
