// distinct_tensors: lists of tensors kept free of repeats by identity (Tensor::is_same,
// the same storage and view), not by value -- the parameters a walk over modules has met,
// where a tied weight is reached through two modules but counts once.
#pragma once

#include "dtr/tensor/tensor.h"

#include <algorithm>
#include <vector>

namespace dtr::fsdp {

inline bool contains_same(const std::vector<Tensor>& list, const Tensor& t) {
  return std::any_of(list.begin(), list.end(), [&](const Tensor& o) { return o.is_same(t); });
}

// Appends t unless the list already holds it; returns whether it was added.
inline bool add_unique(std::vector<Tensor>& list, const Tensor& t) {
  if (contains_same(list, t)) return false;
  list.push_back(t);
  return true;
}

}  // namespace dtr::fsdp
