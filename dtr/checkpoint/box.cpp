#include "dtr/checkpoint/box.h"

#include "dtr/base/error.h"

#include <algorithm>

namespace dtr::checkpoint {

int64_t Box::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::string Box::to_string() const {
  std::vector<std::string> dims;
  for (size_t d = 0; d < shape.size(); ++d) dims.push_back(fmt::format("{}:{}", offset[d], offset[d] + shape[d]));
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

std::optional<Box> intersect(const Box& a, const Box& b) {
  DTR_INTERNAL_ASSERT(a.shape.size() == b.shape.size() && a.offset.size() == a.shape.size() &&
                          b.offset.size() == b.shape.size(),
                      "boxes {} and {} differ in rank", a.to_string(), b.to_string());
  Box out;
  for (size_t d = 0; d < a.shape.size(); ++d) {
    int64_t lo = std::max(a.offset[d], b.offset[d]);
    int64_t hi = std::min(a.offset[d] + a.shape[d], b.offset[d] + b.shape[d]);
    if (hi <= lo) return std::nullopt;
    out.offset.push_back(lo);
    out.shape.push_back(hi - lo);
  }
  return out;
}

namespace {

Shape row_major_strides(const Shape& shape) {
  Shape strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

}  // namespace

std::vector<Run> copy_runs(const Box& src, const Box& dst, const Box& part) {
  const int64_t ndim = static_cast<int64_t>(part.shape.size());
  if (part.numel() == 0) return {};
  if (ndim == 0) return {Run{0, 0, 1}};
  // k: the outermost dim of the run; every dim after it spans the whole extent
  // of both boxes, so a run covers part.shape[k] * (product of the later dims).
  int64_t k = ndim - 1;
  while (k > 0 && part.shape[k] == src.shape[k] && part.shape[k] == dst.shape[k]) --k;
  int64_t run = 1;
  for (int64_t d = k; d < ndim; ++d) run *= part.shape[d];
  const Shape ss = row_major_strides(src.shape), ds = row_major_strides(dst.shape);
  std::vector<Run> runs;
  Shape index(static_cast<size_t>(k), 0);  // over part's dims [0, k)
  while (true) {
    int64_t s = (part.offset[k] - src.offset[k]) * ss[k], t = (part.offset[k] - dst.offset[k]) * ds[k];
    for (int64_t d = 0; d < k; ++d) {
      s += (part.offset[d] - src.offset[d] + index[d]) * ss[d];
      t += (part.offset[d] - dst.offset[d] + index[d]) * ds[d];
    }
    runs.push_back({s, t, run});
    int64_t d = k - 1;
    while (d >= 0 && ++index[d] == part.shape[d]) index[d--] = 0;
    if (d < 0) break;
  }
  return runs;
}

}  // namespace dtr::checkpoint
