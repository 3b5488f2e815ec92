// Sharding rules and DTensor ops for sum and mean over dims; see
// dtr/dtensor/dtensor_ops.h. A reduction over a sharded dim leaves each rank with a
// summand of the result: Partial(sum). mean is the local sum divided by the
// global count, so uneven and empty shards need no special care.
#include "dtr/base/error.h"
#include "dtr/dtensor/dtensor_ops.h"
#include "dtr/dtensor/sharding/run_op.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/reduce.h"

#include <algorithm>

namespace dtr::dtensor {

namespace {

// The reduced dims, wrapped and sorted; empty means every dim.
std::vector<int64_t> normalize_dims(std::string_view op, const DTensorSpec& x, const std::vector<int64_t>& dims) {
  const int64_t n = x.ndim();
  std::vector<int64_t> result;
  if (dims.empty()) {
    for (int64_t d = 0; d < n; ++d) result.push_back(d);
    return result;
  }
  for (int64_t d : dims) {
    DTR_CHECK(d >= -n && d < n, "dtensor::{}: dim {} is out of range for shape {}", op, d, shape_str(x.shape));
    const int64_t w = d < 0 ? d + n : d;
    DTR_CHECK(std::find(result.begin(), result.end(), w) == result.end(), "dtensor::{}: dim {} appears twice in the dims",
              op, w);
    result.push_back(w);
  }
  std::sort(result.begin(), result.end());
  return result;
}

std::string dims_key(const std::vector<int64_t>& dims, bool keepdim) {
  return fmt::format("dims [{}] keepdim {}", fmt::join(dims, ","), keepdim);
}

OpSharding reduction_rule(const DTensorSpec& x, const std::vector<int64_t>& dims, bool keepdim) {
  auto reduced = [&](int64_t d) { return std::find(dims.begin(), dims.end(), d) != dims.end(); };
  OpSharding s;
  for (int64_t d = 0; d < x.ndim(); ++d) {
    if (!reduced(d)) {
      s.shape.push_back(x.shape[d]);
    } else if (keepdim) {
      s.shape.push_back(1);
    }
  }
  Placements in = x.placements, out = x.placements;
  for (size_t i = 0; i < in.size(); ++i) {
    const Placement& q = x.placements[i];
    if (q.is_shard()) {
      if (reduced(q.dim())) {
        out[i] = Partial();
      } else {
        const int64_t before = std::count_if(dims.begin(), dims.end(), [&](int64_t r) { return r < q.dim(); });
        out[i] = Shard(keepdim ? q.dim() : q.dim() - before);
      }
    } else if (q.is_partial() && !is_partial_sum(q)) {
      in[i] = out[i] = Replicate();
    }
  }
  s.inputs = {in};
  s.output = out;
  return s;
}

}  // namespace

DTensor sum(const DTensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  DTR_CHECK(x.defined(), "dtensor::sum: the DTensor is undefined");
  const std::vector<int64_t> d = normalize_dims("sum", x.spec(), dims);
  PreparedOp p = prepare_op("sum", dims_key(d, keepdim), {&x}, [&](const std::vector<const DTensorSpec*>& specs) {
    return reduction_rule(*specs[0], d, keepdim);
  });
  return wrap_result(p, d.empty() ? dtr::sum(p.locals[0]) : dtr::sum(p.locals[0], d, keepdim));
}

DTensor mean(const DTensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  DTR_CHECK(x.defined(), "dtensor::mean: the DTensor is undefined");
  DTR_CHECK(is_floating(x.dtype()), "dtensor::mean: expected a floating dtype (f32, f64, bf16, f16), got {}", x.dtype());
  const std::vector<int64_t> d = normalize_dims("mean", x.spec(), dims);
  PreparedOp p = prepare_op("mean", dims_key(d, keepdim), {&x}, [&](const std::vector<const DTensorSpec*>& specs) {
    return reduction_rule(*specs[0], d, keepdim);
  });
  int64_t count = 1;
  for (int64_t r : d) count *= x.shape()[r];
  Tensor local_sum = d.empty() ? dtr::sum(p.locals[0]) : dtr::sum(p.locals[0], d, keepdim);
  return wrap_result(p, dtr::div(local_sum, Scalar(static_cast<double>(count))));
}

}  // namespace dtr::dtensor
