// Sharding rule and DTensor ops for reshape / view; see dtr/dtensor/dtensor_ops.h.
// A Shard(d) survives when dim d appears unchanged in the new shape: same size,
// and the dims before it have the same product (so the element order around it
// is the same). A reshape that splits or merges a sharded dim replicates that
// mesh dim first (with the once-per-op warning).
#include "dtr/base/error.h"
#include "dtr/dtensor/dtensor_ops.h"
#include "dtr/dtensor/sharding/run_op.h"

namespace dtr::dtensor {

namespace {

Shape infer_shape(const Shape& from, Shape to) {
  int64_t known = 1, infer = -1;
  for (size_t d = 0; d < to.size(); ++d) {
    if (to[d] == -1) {
      DTR_CHECK(infer < 0, "dtensor::reshape: only one dim may be -1, got {}", shape_str(to));
      infer = static_cast<int64_t>(d);
    } else {
      DTR_CHECK(to[d] >= 0, "dtensor::reshape: invalid size {} in {}", to[d], shape_str(to));
      known *= to[d];
    }
  }
  const int64_t numel = numel_of(from);
  if (infer >= 0) {
    DTR_CHECK(known != 0 && numel % known == 0, "dtensor::reshape: shape {} is invalid for a DTensor of shape {}",
              shape_str(to), shape_str(from));
    to[infer] = numel / known;
  }
  DTR_CHECK(numel_of(to) == numel, "dtensor::reshape: shape {} is invalid for a DTensor of shape {} ({} elements)",
            shape_str(to), shape_str(from), numel);
  return to;
}

// The dim of `to` that is dim d of `from` unchanged, or -1.
int64_t surviving_dim(const Shape& from, const Shape& to, int64_t d) {
  int64_t before = 1;
  for (int64_t k = 0; k < d; ++k) before *= from[k];
  int64_t prefix = 1;
  for (size_t k = 0; k < to.size(); ++k) {
    if (prefix == before && to[k] == from[d]) return static_cast<int64_t>(k);
    prefix *= to[k];
  }
  return -1;
}

OpSharding reshape_rule(const DTensorSpec& x, const Shape& shape) {
  OpSharding s;
  s.shape = shape;
  Placements in = x.placements, out = x.placements;
  for (size_t i = 0; i < in.size(); ++i) {
    const Placement& q = x.placements[i];
    if (q.is_shard()) {
      const int64_t d = surviving_dim(x.shape, shape, q.dim());
      if (d >= 0) {
        out[i] = Shard(d);
      } else {
        in[i] = out[i] = Replicate();
        s.fallback = true;
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

DTensor reshape(const DTensor& x, Shape shape) {
  DTR_CHECK(x.defined(), "dtensor::reshape: the DTensor is undefined");
  const Shape target = infer_shape(x.shape(), std::move(shape));
  PreparedOp p = prepare_op("reshape", shape_str(target), {&x}, [&](const std::vector<const DTensorSpec*>& specs) {
    return reshape_rule(*specs[0], target);
  });
  const Shape local_shape = DTensorSpec::make(p.mesh, p.sharding.output, target, x.dtype()).local_shape();
  return wrap_result(p, p.locals[0].reshape(local_shape));
}

DTensor view(const DTensor& x, Shape shape) { return reshape(x, std::move(shape)); }

}  // namespace dtr::dtensor
