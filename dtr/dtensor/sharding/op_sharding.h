// OpSharding: the decision a sharding propagation rule makes for one op call on
// DTensors: the placements each input is redistributed to before the local op
// runs, and the placements and global shape of the result. Rules are pure
// functions of the input specs (and the op's arguments), so a decision can be
// cached (dtr/dtensor/sharding/rule_cache.h).
#pragma once

#include "dtr/dtensor/dtensor_spec.h"

#include <vector>

namespace dtr::dtensor {

struct OpSharding {
  std::vector<Placements> inputs;  // target placements, one entry per DTensor input
  Placements output;               // placements of the result
  Shape shape;                     // global shape of the result
  bool fallback = false;           // no rule applied: everything was made Replicate
};

// The all-Replicate decision used when no rule applies.
OpSharding replicate_everything(const std::vector<const DTensorSpec*>& inputs, Shape shape);

// Partial(sum) is the only pending reduction linear ops keep; others are reduced first.
inline bool is_partial_sum(const Placement& p) {
  return p.is_partial() && p.reduce_op().kind == mesh::ReduceOp::Kind::sum;
}

}  // namespace dtr::dtensor
