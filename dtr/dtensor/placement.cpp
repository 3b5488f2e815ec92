#include "dtr/dtensor/placement.h"

#include "dtr/base/error.h"

#include <fmt/format.h>

namespace dtr {

Placement Placement::partial(mesh::ReduceOp op) {
  DTR_CHECK(op.kind != mesh::ReduceOp::Kind::premul_sum,
            "Partial: expected a sum, avg, max or min reduction, got {}", mesh::to_string(op));
  return Placement(Kind::partial, 0, op);
}

int64_t Placement::dim() const {
  DTR_CHECK(is_shard(), "Placement::dim: {} is not a Shard placement", to_string());
  return dim_;
}

mesh::ReduceOp Placement::reduce_op() const {
  DTR_CHECK(is_partial(), "Placement::reduce_op: {} is not a Partial placement", to_string());
  return op_;
}

std::string Placement::to_string() const {
  switch (kind_) {
    case Kind::shard: return fmt::format("Shard({})", dim_);
    case Kind::replicate: return "Replicate()";
    case Kind::partial: return fmt::format("Partial({})", mesh::to_string(op_));
  }
  return "?";
}

bool Placement::operator==(const Placement& other) const {
  if (kind_ != other.kind_) return false;
  if (kind_ == Kind::shard) return dim_ == other.dim_;
  if (kind_ == Kind::partial) return op_ == other.op_;
  return true;
}

std::string to_string(const Placements& placements) {
  std::vector<std::string> parts;
  for (const auto& p : placements) parts.push_back(p.to_string());
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

}  // namespace dtr
