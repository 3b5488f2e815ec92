// DTensorSpec: everything about a DTensor except its local data: the mesh, one
// placement per mesh dim, the global shape and the dtype. Also the sharding
// arithmetic every distributed layer shares: which rows of a dim a rank holds
// (torch.chunk semantics, so uneven sizes and empty shards are normal) and the
// local shape and global offset of any rank's shard.
#pragma once

#include "dtr/dtensor/placement.h"
#include "dtr/mesh/device_mesh.h"
#include "dtr/tensor/dtype.h"
#include "dtr/tensor/tensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtr {

// Rows [offset, offset + length) of a dim of `size` rows that chunk `index` of
// `chunks` holds: chunks of ceil(size / chunks) rows, the last ones shorter or empty.
struct ShardRange {
  int64_t offset = 0;
  int64_t length = 0;
};
ShardRange shard_range(int64_t size, int64_t chunks, int64_t index);
// ceil(size / chunks): the padded length every chunk is brought to for collectives.
int64_t padded_shard_length(int64_t size, int64_t chunks);

struct DTensorSpec {
  mesh::DeviceMesh mesh;
  Placements placements;  // one per mesh dim; Shard dims normalised to >= 0
  Shape shape;            // global shape
  DType dtype = DType::f32;

  // Validates and normalises (negative Shard dims wrap); errors name the problem.
  static DTensorSpec make(mesh::DeviceMesh mesh, Placements placements, Shape shape, DType dtype);

  int64_t ndim() const { return static_cast<int64_t>(shape.size()); }
  // This rank's local shape and the global offset of its first element.
  Shape local_shape() const;
  Shape local_offset() const;
  // The same for the rank at `coordinate` on the mesh.
  Shape local_shape(const std::vector<int64_t>& coordinate) const;
  Shape local_offset(const std::vector<int64_t>& coordinate) const;

  bool has_partial() const;
  bool is_replicated() const;  // every placement is Replicate
  // The mesh dims that shard tensor dim `dim`, in mesh order.
  std::vector<int> mesh_dims_sharding(int64_t dim) const;

  DTensorSpec with_placements(Placements placements) const;

  // "DTensorSpec(shape [8, 4], f32, [Shard(0)], mesh (dp=4))".
  std::string to_string() const;
  bool operator==(const DTensorSpec& other) const;
};

}  // namespace dtr
