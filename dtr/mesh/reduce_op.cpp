#include "dtr/mesh/reduce_op.h"

#include <fmt/format.h>

namespace dtr::mesh {

std::string to_string(ReduceOp op) {
  switch (op.kind) {
    case ReduceOp::Kind::sum: return "sum";
    case ReduceOp::Kind::avg: return "avg";
    case ReduceOp::Kind::max: return "max";
    case ReduceOp::Kind::min: return "min";
    case ReduceOp::Kind::premul_sum: return fmt::format("premul_sum({})", op.factor);
  }
  return "unknown";
}

}  // namespace dtr::mesh
