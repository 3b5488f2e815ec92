// Boxes of a global tensor (an offset and a shape per dim) and the arithmetic
// resharding needs: the intersection of a stored chunk's box with the box a rank
// needs, and the contiguous byte runs that copy one into the other when both are
// stored row-major.
#pragma once

#include "dtr/tensor/tensor.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtr::checkpoint {

struct Box {
  Shape offset;  // global index of the first element, per dim
  Shape shape;   // extent per dim

  int64_t numel() const;
  std::string to_string() const;  // "[2:4, 0:8]"
  friend bool operator==(const Box&, const Box&) = default;
};

// The common part of a and b (same rank); nullopt when it is empty.
std::optional<Box> intersect(const Box& a, const Box& b);

// One contiguous copy: `elements` elements from element `src` of the source box
// (row-major) to element `dst` of the destination box (row-major).
struct Run {
  int64_t src = 0;
  int64_t dst = 0;
  int64_t elements = 0;
};

// The runs that copy `part` (inside both boxes) from `src` to `dst`, merged as
// far as the layouts allow (whole trailing dims become one run).
std::vector<Run> copy_runs(const Box& src, const Box& dst, const Box& part);

}  // namespace dtr::checkpoint
