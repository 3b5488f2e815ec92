// ReduceOp: how a collective combines the ranks' values (sum, avg, max, min, and a
// pre-multiplied sum that scales every contribution by a factor before summing,
// which FSDP uses to divide gradients by the world size without a second pass).
#pragma once

#include <string>

namespace dtr::mesh {

struct ReduceOp {
  enum class Kind : int { sum, avg, max, min, premul_sum };

  Kind kind = Kind::sum;
  double factor = 1.0;  // premul_sum only

  static ReduceOp sum() { return {Kind::sum}; }
  static ReduceOp avg() { return {Kind::avg}; }
  static ReduceOp max() { return {Kind::max}; }
  static ReduceOp min() { return {Kind::min}; }
  static ReduceOp premul_sum(double factor) { return {Kind::premul_sum, factor}; }

  bool operator==(const ReduceOp&) const = default;
};

std::string to_string(ReduceOp op);  // "sum", "premul_sum(0.25)", ...

}  // namespace dtr::mesh
