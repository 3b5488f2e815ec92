// Placement: how a DTensor's global tensor is laid out along one dim of its
// DeviceMesh, as in PyTorch:
//   Shard(d)      each rank of that mesh dim holds one chunk of tensor dim d
//                 (torch.chunk semantics: chunks of ceil(n/k) rows; trailing ranks
//                 may hold fewer rows or none);
//   Replicate()   every rank holds the whole tensor;
//   Partial(op)   every rank holds a tensor of the full shape and the global value
//                 is their reduction (sum, avg, max or min), still to be done.
#pragma once

#include "dtr/mesh/reduce_op.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtr {

class Placement {
 public:
  enum class Kind : uint8_t { shard, replicate, partial };

  static Placement shard(int64_t dim) { return Placement(Kind::shard, dim, mesh::ReduceOp::sum()); }
  static Placement replicate() { return Placement(Kind::replicate, 0, mesh::ReduceOp::sum()); }
  // op: sum, avg, max or min.
  static Placement partial(mesh::ReduceOp op = mesh::ReduceOp::sum());

  Kind kind() const { return kind_; }
  bool is_shard() const { return kind_ == Kind::shard; }
  bool is_shard(int64_t dim) const { return kind_ == Kind::shard && dim_ == dim; }
  bool is_replicate() const { return kind_ == Kind::replicate; }
  bool is_partial() const { return kind_ == Kind::partial; }
  int64_t dim() const;                // the sharded tensor dim (Shard only)
  mesh::ReduceOp reduce_op() const;  // the pending reduction (Partial only)

  std::string to_string() const;  // "Shard(0)", "Replicate()", "Partial(sum)"
  bool operator==(const Placement& other) const;

 private:
  Placement(Kind kind, int64_t dim, mesh::ReduceOp op) : kind_(kind), dim_(dim), op_(op) {}

  Kind kind_;
  int64_t dim_;
  mesh::ReduceOp op_;
};

using Placements = std::vector<Placement>;

// The PyTorch spellings: {Shard(0), Replicate()}.
inline Placement Shard(int64_t dim) { return Placement::shard(dim); }
inline Placement Replicate() { return Placement::replicate(); }
inline Placement Partial(mesh::ReduceOp op = mesh::ReduceOp::sum()) { return Placement::partial(op); }

std::string to_string(const Placements& placements);  // "[Shard(0), Replicate()]"

}  // namespace dtr
