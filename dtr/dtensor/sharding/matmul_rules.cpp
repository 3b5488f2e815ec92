// Sharding rules and DTensor ops for matmul and linear; see dtr/dtensor/dtensor_ops.h.
#include "dtr/base/error.h"
#include "dtr/dtensor/dtensor_ops.h"
#include "dtr/dtensor/sharding/run_op.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/matmul.h"

namespace dtr::dtensor {

namespace {

// a [..., m, k] . b [k, n], or a [B..., m, k] . b [B..., k, n] with equal batch dims.
bool matmul_supported(const DTensorSpec& a, const DTensorSpec& b) {
  const int64_t na = a.ndim(), nb = b.ndim();
  if (na < 2 || nb < 2 || a.shape[na - 1] != b.shape[nb - 2]) return false;
  if (nb == 2) return true;
  return na == nb && std::equal(a.shape.begin(), a.shape.end() - 2, b.shape.begin());
}

Shape matmul_shape(const DTensorSpec& a, const DTensorSpec& b) {
  Shape out(a.shape.begin(), a.shape.end() - 1);
  out.push_back(b.shape.back());
  return out;
}

OpSharding matmul_rule(const DTensorSpec& a, const DTensorSpec& b) {
  if (!matmul_supported(a, b)) {
    DTR_CHECK(a.ndim() >= 1 && b.ndim() >= 1, "dtensor::matmul: operands need at least one dim, got {} and {}",
              shape_str(a.shape), shape_str(b.shape));
    // The local op checks the shapes; the result shape is what it gives.
    Tensor ma = empty(a.shape, {.dtype = a.dtype, .device = Device::meta()});
    Tensor mb = empty(b.shape, {.dtype = b.dtype, .device = Device::meta()});
    return replicate_everything({&a, &b}, dtr::matmul(ma, mb).sizes());
  }
  const int64_t na = a.ndim(), nb = b.ndim();
  const bool batched = nb > 2;
  const int n = a.mesh.ndim();
  OpSharding s;
  s.shape = matmul_shape(a, b);
  Placements pa(n, Replicate()), pb(n, Replicate()), out(n, Replicate());
  for (int i = 0; i < n; ++i) {
    const Placement &qa = a.placements[i], &qb = b.placements[i];
    if (qa.is_shard() && qa.dim() < na - 1) {  // batch or m
      pa[i] = qa;
      if (batched && qa.dim() < na - 2) pb[i] = qa;
      out[i] = qa;
    } else if (batched && qb.is_shard() && qb.dim() < nb - 2) {  // batch, from b
      pa[i] = pb[i] = out[i] = qb;
    } else if (qb.is_shard(nb - 1)) {  // n
      pb[i] = qb;
      out[i] = Shard(na - 1);
    } else if (qa.is_shard(na - 1) || qb.is_shard(nb - 2)) {  // k: partial sums
      pa[i] = Shard(na - 1);
      pb[i] = Shard(nb - 2);
      out[i] = Partial();
    } else if ((is_partial_sum(qa) && qb.is_replicate()) || (qa.is_replicate() && is_partial_sum(qb))) {
      pa[i] = qa;
      pb[i] = qb;
      out[i] = Partial();
    }
  }
  s.inputs = {pa, pb};
  s.output = out;
  return s;
}

OpSharding linear_rule(const DTensorSpec& x, const DTensorSpec& w, const DTensorSpec* bias) {
  DTR_CHECK(x.ndim() >= 1 && w.ndim() == 2 && x.shape.back() == w.shape[1],
            "dtensor::linear: expected x [..., in] and weight [out, in], got x {} and weight {}", shape_str(x.shape),
            shape_str(w.shape));
  DTR_CHECK(bias == nullptr || (bias->ndim() == 1 && bias->shape[0] == w.shape[0]),
            "dtensor::linear: expected bias [{}], got {}", w.shape[0], shape_str(bias->shape));
  const int64_t nx = x.ndim();
  const int n = x.mesh.ndim();
  OpSharding s;
  s.shape = Shape(x.shape.begin(), x.shape.end() - 1);
  s.shape.push_back(w.shape[0]);
  Placements px(n, Replicate()), pw(n, Replicate()), pbias(n, Replicate()), out(n, Replicate());
  for (int i = 0; i < n; ++i) {
    const Placement &qx = x.placements[i], &qw = w.placements[i];
    if (qx.is_shard() && qx.dim() < nx - 1) {  // rows of x
      px[i] = out[i] = qx;
    } else if (qw.is_shard(0)) {  // output features (column parallel)
      pw[i] = pbias[i] = qw;
      out[i] = Shard(nx - 1);
    } else if (qx.is_shard(nx - 1) || qw.is_shard(1)) {  // input features (row parallel)
      px[i] = Shard(nx - 1);
      pw[i] = Shard(1);
      pbias[i] = out[i] = Partial();  // the bias is added once in the sum
    } else if ((is_partial_sum(qx) && qw.is_replicate()) || (qx.is_replicate() && is_partial_sum(qw))) {
      px[i] = qx;
      pw[i] = qw;
      pbias[i] = out[i] = Partial();
    }
  }
  s.inputs = {px, pw};
  if (bias != nullptr) s.inputs.push_back(pbias);
  s.output = out;
  return s;
}

}  // namespace

DTensor matmul(const DTensor& a, const DTensor& b) {
  PreparedOp p = prepare_op("matmul", "", {&a, &b}, [](const std::vector<const DTensorSpec*>& specs) {
    return matmul_rule(*specs[0], *specs[1]);
  });
  return wrap_result(p, dtr::matmul(p.locals[0], p.locals[1]));
}

DTensor linear(const DTensor& x, const DTensor& weight, const DTensor& bias) {
  std::vector<const DTensor*> inputs = {&x, &weight};
  if (bias.defined()) inputs.push_back(&bias);
  PreparedOp p = prepare_op("linear", "", inputs, [](const std::vector<const DTensorSpec*>& specs) {
    return linear_rule(*specs[0], *specs[1], specs.size() > 2 ? specs[2] : nullptr);
  });
  return wrap_result(p, dtr::linear(p.locals[0], p.locals[1], bias.defined() ? p.locals[2] : Tensor()));
}

}  // namespace dtr::dtensor
