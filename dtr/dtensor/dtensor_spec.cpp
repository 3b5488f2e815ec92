#include "dtr/dtensor/dtensor_spec.h"

#include "dtr/base/error.h"

#include <algorithm>

namespace dtr {

ShardRange shard_range(int64_t size, int64_t chunks, int64_t index) {
  DTR_INTERNAL_ASSERT(chunks > 0 && index >= 0 && index < chunks, "shard_range({}, {}, {})", size, chunks, index);
  const int64_t chunk = padded_shard_length(size, chunks);
  const int64_t start = std::min(index * chunk, size);
  return {start, std::clamp<int64_t>(size - start, 0, chunk)};
}

int64_t padded_shard_length(int64_t size, int64_t chunks) { return (size + chunks - 1) / chunks; }

DTensorSpec DTensorSpec::make(mesh::DeviceMesh mesh, Placements placements, Shape shape, DType dtype) {
  DTR_CHECK(mesh.defined(), "DTensor: the mesh is empty (create it with init_device_mesh)");
  DTR_CHECK(static_cast<int>(placements.size()) == mesh.ndim(),
            "DTensor: expected one placement per mesh dim ({} for {}), got {} placements {}", mesh.ndim(),
            mesh.to_string(), placements.size(), dtr::to_string(placements));
  const int64_t ndim = static_cast<int64_t>(shape.size());
  for (auto& p : placements) {
    if (!p.is_shard()) continue;
    int64_t d = p.dim();
    DTR_CHECK(d >= -ndim && d < ndim, "DTensor: {} is out of range for a tensor of shape {} ({} dims)",
              p.to_string(), shape_str(shape), ndim);
    if (d < 0) p = Placement::shard(d + ndim);
  }
  return DTensorSpec{std::move(mesh), std::move(placements), std::move(shape), dtype};
}

Shape DTensorSpec::local_shape() const { return local_shape(mesh.coordinate()); }
Shape DTensorSpec::local_offset() const { return local_offset(mesh.coordinate()); }

namespace {

// Applies the placements in mesh-dim order: a tensor dim sharded by several mesh
// dims is chunked by the first, then each chunk by the next (PyTorch's order).
void local_box(const DTensorSpec& spec, const std::vector<int64_t>& coordinate, Shape& sizes, Shape& offsets) {
  sizes = spec.shape;
  offsets.assign(spec.shape.size(), 0);
  for (size_t i = 0; i < spec.placements.size(); ++i) {
    const Placement& p = spec.placements[i];
    if (!p.is_shard()) continue;
    const int64_t d = p.dim();
    ShardRange r = shard_range(sizes[d], spec.mesh.size(static_cast<int>(i)), coordinate[i]);
    offsets[d] += r.offset;
    sizes[d] = r.length;
  }
}

}  // namespace

Shape DTensorSpec::local_shape(const std::vector<int64_t>& coordinate) const {
  Shape sizes, offsets;
  local_box(*this, coordinate, sizes, offsets);
  return sizes;
}

Shape DTensorSpec::local_offset(const std::vector<int64_t>& coordinate) const {
  Shape sizes, offsets;
  local_box(*this, coordinate, sizes, offsets);
  return offsets;
}

bool DTensorSpec::has_partial() const {
  return std::any_of(placements.begin(), placements.end(), [](const Placement& p) { return p.is_partial(); });
}

bool DTensorSpec::is_replicated() const {
  return std::all_of(placements.begin(), placements.end(), [](const Placement& p) { return p.is_replicate(); });
}

std::vector<int> DTensorSpec::mesh_dims_sharding(int64_t dim) const {
  std::vector<int> dims;
  for (size_t i = 0; i < placements.size(); ++i) {
    if (placements[i].is_shard(dim)) dims.push_back(static_cast<int>(i));
  }
  return dims;
}

DTensorSpec DTensorSpec::with_placements(Placements new_placements) const {
  return make(mesh, std::move(new_placements), shape, dtype);
}

std::string DTensorSpec::to_string() const {
  return fmt::format("DTensorSpec(shape {}, {}, {}, {})", shape_str(shape), dtype_name(dtype),
                     dtr::to_string(placements), mesh.to_string());
}

bool DTensorSpec::operator==(const DTensorSpec& other) const {
  return mesh == other.mesh && placements == other.placements && shape == other.shape && dtype == other.dtype;
}

}  // namespace dtr
