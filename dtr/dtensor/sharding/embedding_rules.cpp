// Sharding rule and DTensor op for embedding(table [V, D], indices); see
// dtr/dtensor/dtensor_ops.h. With a row-sharded table (vocab parallel) each rank
// looks up the indices that fall in its rows and zeroes the others, so the
// result is Partial(sum); the table's gradient stays in its own rows.
#include "dtr/base/error.h"
#include "dtr/dtensor/dtensor_ops.h"
#include "dtr/dtensor/sharding/run_op.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/ops/reduce.h"

namespace dtr::dtensor {

namespace {

OpSharding embedding_rule(const DTensorSpec& table, const DTensorSpec& indices) {
  const int n = table.mesh.ndim();
  const int64_t ni = indices.ndim();
  OpSharding s;
  s.shape = indices.shape;
  s.shape.push_back(table.shape[1]);
  Placements pt(n, Replicate()), pi(n, Replicate()), out(n, Replicate());
  for (int i = 0; i < n; ++i) {
    const Placement &qt = table.placements[i], &qi = indices.placements[i];
    if (qt.is_shard(0)) {  // vocab parallel
      pt[i] = qt;
      out[i] = Partial();
    } else if (qi.is_shard()) {
      pi[i] = out[i] = qi;
    } else if (qt.is_shard(1)) {
      pt[i] = qt;
      out[i] = Shard(ni);
    } else if (is_partial_sum(qt)) {
      pt[i] = qt;
      out[i] = Partial();
    }
  }
  s.inputs = {pt, pi};
  s.output = out;
  return s;
}

// Looks up the indices in [offset, offset + rows) in `table` (those rows of the
// global table) and gives zeros for the others.
Tensor masked_lookup(const Tensor& table, const Tensor& indices, int64_t offset) {
  const int64_t rows = table.size(0);
  Shape out_shape = indices.sizes();
  out_shape.push_back(table.size(1));
  if (rows == 0) {
    // No rows here: zeros, connected to the (empty) table so its gradient exists.
    return add(zeros(out_shape, {.dtype = table.dtype(), .device = table.device()}), mul(sum(table), Scalar(0)));
  }
  Tensor mask = mul(ge(indices, Scalar(offset)), lt(indices, Scalar(offset + rows)));  // u8
  Tensor local_indices = where(mask, sub(indices, Scalar(offset)), zeros_like(indices));
  return mul(embedding(table, local_indices), cast(mask, table.dtype()).unsqueeze(-1));
}

}  // namespace

DTensor embedding(const DTensor& table, const DTensor& indices) {
  check_same_mesh("embedding", {&table, &indices});
  DTR_CHECK(table.dim() == 2, "dtensor::embedding: expected a table [V, D], got shape {}", shape_str(table.shape()));
  DTR_CHECK(indices.dtype() == DType::i64, "dtensor::embedding: expected i64 indices, got {}", indices.dtype());
  PreparedOp p = prepare_op("embedding", "", {&table, &indices}, [](const std::vector<const DTensorSpec*>& specs) {
    return embedding_rule(*specs[0], *specs[1]);
  });
  const Tensor& t = p.locals[0];
  const Tensor& idx = p.locals[1];
  const DTensorSpec table_spec = table.spec().with_placements(p.sharding.inputs[0]);
  bool row_sharded = false;
  for (const auto& q : table_spec.placements) row_sharded = row_sharded || q.is_shard(0);
  if (!row_sharded) return wrap_result(p, dtr::embedding(t, idx));
  // Out-of-range indices would be masked away on every rank: refuse them here.
  if (idx.numel() > 0) {
    const int64_t lo = dtr::min(idx).item<int64_t>(), hi = dtr::max(idx).item<int64_t>();
    DTR_CHECK(lo >= 0 && hi < table.size(0), "dtensor::embedding: indices must be in [0, {}), found values in [{}, {}]",
              table.size(0), lo, hi);
  }
  return wrap_result(p, masked_lookup(t, idx, table_spec.local_offset()[0]));
}

}  // namespace dtr::dtensor
