// Sharding rules and DTensor ops for elementwise unary, scalar, binary
// (broadcasting) ops and cast; see dtr/dtensor/dtensor_ops.h for the rules.
#include "dtr/base/error.h"
#include "dtr/dtensor/dtensor_ops.h"
#include "dtr/dtensor/sharding/run_op.h"

#include <functional>

namespace dtr::dtensor {

namespace {

// How an op treats a Partial(sum) input.
enum class Linearity {
  none,        // not linear: reduce Partial first
  linear,      // f(sum x_i) = sum f(x_i)
};

OpSharding unary_rule(const DTensorSpec& x, Linearity linearity) {
  OpSharding s;
  Placements p = x.placements;
  for (auto& pl : p) {
    if (pl.is_partial() && !(linearity == Linearity::linear && is_partial_sum(pl))) pl = Replicate();
  }
  s.inputs = {p};
  s.output = p;
  s.shape = x.shape;
  return s;
}

DTensor run_unary(std::string_view op, const std::string& args, const DTensor& x, Linearity linearity,
                  const std::function<Tensor(const Tensor&)>& local_op) {
  PreparedOp p = prepare_op(op, args, {&x}, [&](const std::vector<const DTensorSpec*>& specs) {
    return unary_rule(*specs[0], linearity);
  });
  return wrap_result(p, local_op(p.locals[0]));
}

enum class BinaryKind { add_sub, mul, div, other };

Shape broadcast_shape(std::string_view op, const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    DTR_CHECK(da == db || da == 1 || db == 1, "dtensor::{}: shapes {} and {} do not broadcast (dim {} of the result: {} vs {})",
              op, shape_str(a), shape_str(b), i, da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// The dim of an input (of `in_ndim` dims, broadcast to `out`) that is result dim
// `out_dim` without broadcasting, or -1 when it has none (missing, or size 1 < out).
int64_t input_dim_of(const Shape& in, const Shape& out, int64_t out_dim) {
  const int64_t lead = static_cast<int64_t>(out.size() - in.size());
  const int64_t d = out_dim - lead;
  if (d < 0 || in[d] != out[out_dim]) return -1;
  return d;
}

OpSharding binary_rule(std::string_view op, const DTensorSpec& a, const DTensorSpec& b, BinaryKind kind) {
  OpSharding s;
  s.shape = broadcast_shape(op, a.shape, b.shape);
  const int n = a.mesh.ndim();
  Placements pa(n, Replicate()), pb(n, Replicate()), out(n, Replicate());
  const DTensorSpec* in[2] = {&a, &b};
  for (int i = 0; i < n; ++i) {
    // A shard of a non-broadcast dim in either input (a first) shards the result.
    int64_t out_dim = -1;
    for (const DTensorSpec* x : in) {
      const Placement& p = x->placements[i];
      if (out_dim < 0 && p.is_shard()) {
        const int64_t d = p.dim() + static_cast<int64_t>(s.shape.size() - x->shape.size());
        if (input_dim_of(x->shape, s.shape, d) >= 0) out_dim = d;
      }
    }
    if (out_dim >= 0) {
      out[i] = Shard(out_dim);
      const int64_t da = input_dim_of(a.shape, s.shape, out_dim), db = input_dim_of(b.shape, s.shape, out_dim);
      pa[i] = da >= 0 ? Shard(da) : Replicate();
      pb[i] = db >= 0 ? Shard(db) : Replicate();
      continue;
    }
    const Placement &qa = a.placements[i], &qb = b.placements[i];
    const bool sa = is_partial_sum(qa), sb = is_partial_sum(qb);
    const bool keep = (kind == BinaryKind::add_sub && sa && sb) ||
                      (kind == BinaryKind::mul && ((sa && qb.is_replicate()) || (qa.is_replicate() && sb))) ||
                      (kind == BinaryKind::div && sa && qb.is_replicate());
    if (keep) {
      pa[i] = qa;
      pb[i] = qb;
      out[i] = Partial();
    }
  }
  s.inputs = {pa, pb};
  s.output = out;
  return s;
}

DTensor run_binary(std::string_view op, const DTensor& a, const DTensor& b, BinaryKind kind,
                   const std::function<Tensor(const Tensor&, const Tensor&)>& local_op) {
  PreparedOp p = prepare_op(op, "", {&a, &b}, [&](const std::vector<const DTensorSpec*>& specs) {
    return binary_rule(op, *specs[0], *specs[1], kind);
  });
  return wrap_result(p, local_op(p.locals[0], p.locals[1]));
}

}  // namespace

DTensor neg(const DTensor& x) { return run_unary("neg", "", x, Linearity::linear, [](const Tensor& t) { return dtr::neg(t); }); }
DTensor abs(const DTensor& x) { return run_unary("abs", "", x, Linearity::none, [](const Tensor& t) { return dtr::abs(t); }); }
DTensor exp(const DTensor& x) { return run_unary("exp", "", x, Linearity::none, [](const Tensor& t) { return dtr::exp(t); }); }
DTensor log(const DTensor& x) { return run_unary("log", "", x, Linearity::none, [](const Tensor& t) { return dtr::log(t); }); }
DTensor sqrt(const DTensor& x) { return run_unary("sqrt", "", x, Linearity::none, [](const Tensor& t) { return dtr::sqrt(t); }); }
DTensor rsqrt(const DTensor& x) { return run_unary("rsqrt", "", x, Linearity::none, [](const Tensor& t) { return dtr::rsqrt(t); }); }
DTensor square(const DTensor& x) { return run_unary("square", "", x, Linearity::none, [](const Tensor& t) { return dtr::square(t); }); }
DTensor tanh(const DTensor& x) { return run_unary("tanh", "", x, Linearity::none, [](const Tensor& t) { return dtr::tanh(t); }); }
DTensor sigmoid(const DTensor& x) { return run_unary("sigmoid", "", x, Linearity::none, [](const Tensor& t) { return dtr::sigmoid(t); }); }
DTensor relu(const DTensor& x) { return run_unary("relu", "", x, Linearity::none, [](const Tensor& t) { return dtr::relu(t); }); }
DTensor silu(const DTensor& x) { return run_unary("silu", "", x, Linearity::none, [](const Tensor& t) { return dtr::silu(t); }); }
DTensor gelu(const DTensor& x, GeluApproximation approximate) {
  return run_unary("gelu", approximate == GeluApproximation::tanh ? "tanh" : "none", x, Linearity::none,
                   [approximate](const Tensor& t) { return dtr::gelu(t, approximate); });
}

DTensor add(const DTensor& a, Scalar b) {
  return run_unary("add_scalar", "", a, Linearity::none, [b](const Tensor& t) { return dtr::add(t, b); });
}
DTensor mul(const DTensor& a, Scalar b) {
  return run_unary("mul_scalar", "", a, Linearity::linear, [b](const Tensor& t) { return dtr::mul(t, b); });
}
DTensor div(const DTensor& a, Scalar b) {
  return run_unary("div_scalar", "", a, Linearity::linear, [b](const Tensor& t) { return dtr::div(t, b); });
}
DTensor pow(const DTensor& a, Scalar b) {
  return run_unary("pow_scalar", "", a, Linearity::none, [b](const Tensor& t) { return dtr::pow(t, b); });
}

DTensor add(const DTensor& a, const DTensor& b) {
  return run_binary("add", a, b, BinaryKind::add_sub, [](const Tensor& x, const Tensor& y) { return dtr::add(x, y); });
}
DTensor sub(const DTensor& a, const DTensor& b) {
  return run_binary("sub", a, b, BinaryKind::add_sub, [](const Tensor& x, const Tensor& y) { return dtr::sub(x, y); });
}
DTensor mul(const DTensor& a, const DTensor& b) {
  return run_binary("mul", a, b, BinaryKind::mul, [](const Tensor& x, const Tensor& y) { return dtr::mul(x, y); });
}
DTensor div(const DTensor& a, const DTensor& b) {
  return run_binary("div", a, b, BinaryKind::div, [](const Tensor& x, const Tensor& y) { return dtr::div(x, y); });
}
DTensor maximum(const DTensor& a, const DTensor& b) {
  return run_binary("maximum", a, b, BinaryKind::other,
                    [](const Tensor& x, const Tensor& y) { return dtr::maximum(x, y); });
}
DTensor minimum(const DTensor& a, const DTensor& b) {
  return run_binary("minimum", a, b, BinaryKind::other,
                    [](const Tensor& x, const Tensor& y) { return dtr::minimum(x, y); });
}

DTensor to(const DTensor& x, DType dtype) {
  const Linearity linearity =
      is_floating(x.dtype()) && is_floating(dtype) ? Linearity::linear : Linearity::none;
  return run_unary("to", std::string(dtype_name(dtype)), x, linearity, [dtype](const Tensor& t) { return t.to(dtype); });
}

}  // namespace dtr::dtensor
