// Sharding rules and DTensor ops for softmax, log_softmax, layer_norm and
// rms_norm: each normalises along one dim, so that dim must be whole on every
// rank; shards of other dims are kept, weight and bias are Replicate. See
// dtr/dtensor/dtensor_ops.h.
#include "dtr/base/error.h"
#include "dtr/dtensor/dtensor_ops.h"
#include "dtr/dtensor/sharding/run_op.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/ops/softmax.h"

namespace dtr::dtensor {

namespace {

// x keeps its shards except along `dim`; Partial is reduced; params are Replicate.
OpSharding normalize_rule(const std::vector<const DTensorSpec*>& specs, int64_t dim) {
  const DTensorSpec& x = *specs[0];
  Placements p = x.placements;
  for (auto& q : p) {
    if (q.is_partial() || q.is_shard(dim)) q = Replicate();
  }
  OpSharding s;
  s.inputs = {p};
  for (size_t j = 1; j < specs.size(); ++j) s.inputs.emplace_back(p.size(), Replicate());
  s.output = p;
  s.shape = x.shape;
  return s;
}

int64_t wrap(std::string_view op, const DTensor& x, int64_t dim) {
  const int64_t n = std::max<int64_t>(x.dim(), 1);
  DTR_CHECK(dim >= -n && dim < n, "dtensor::{}: dim {} is out of range for shape {}", op, dim, shape_str(x.shape()));
  return dim < 0 ? dim + n : dim;
}

void check_param(std::string_view op, std::string_view name, const DTensor& x, const DTensor& param) {
  if (!param.defined()) return;
  DTR_CHECK(x.dim() >= 1 && param.shape() == Shape{x.size(-1)}, "dtensor::{}: expected {} of shape [{}], got {}", op,
            name, x.dim() >= 1 ? x.size(-1) : 0, shape_str(param.shape()));
}

std::vector<const DTensor*> inputs_of(const DTensor& x, const DTensor& a, const DTensor& b) {
  std::vector<const DTensor*> inputs = {&x};
  if (a.defined()) inputs.push_back(&a);
  if (b.defined()) inputs.push_back(&b);
  return inputs;
}

}  // namespace

DTensor softmax(const DTensor& x, int64_t dim) {
  DTR_CHECK(x.defined(), "dtensor::softmax: the DTensor is undefined");
  const int64_t d = wrap("softmax", x, dim);
  PreparedOp p = prepare_op("softmax", std::to_string(d), {&x},
                            [d](const std::vector<const DTensorSpec*>& specs) { return normalize_rule(specs, d); });
  return wrap_result(p, dtr::softmax(p.locals[0], d));
}

DTensor log_softmax(const DTensor& x, int64_t dim) {
  DTR_CHECK(x.defined(), "dtensor::log_softmax: the DTensor is undefined");
  const int64_t d = wrap("log_softmax", x, dim);
  PreparedOp p = prepare_op("log_softmax", std::to_string(d), {&x},
                            [d](const std::vector<const DTensorSpec*>& specs) { return normalize_rule(specs, d); });
  return wrap_result(p, dtr::log_softmax(p.locals[0], d));
}

DTensor layer_norm(const DTensor& x, const DTensor& weight, const DTensor& bias, double eps) {
  DTR_CHECK(x.defined() && x.dim() >= 1, "dtensor::layer_norm: expected a DTensor with at least one dim");
  check_param("layer_norm", "weight", x, weight);
  check_param("layer_norm", "bias", x, bias);
  const int64_t last = x.dim() - 1;
  PreparedOp p = prepare_op("layer_norm", fmt::format("w {} b {}", weight.defined(), bias.defined()),
                            inputs_of(x, weight, bias),
                            [last](const std::vector<const DTensorSpec*>& specs) { return normalize_rule(specs, last); });
  size_t next = 1;
  Tensor w = weight.defined() ? p.locals[next++] : Tensor();
  Tensor b = bias.defined() ? p.locals[next++] : Tensor();
  return wrap_result(p, dtr::layer_norm(p.locals[0], x.size(-1), w, b, eps));
}

DTensor rms_norm(const DTensor& x, const DTensor& weight, double eps) {
  DTR_CHECK(x.defined() && x.dim() >= 1, "dtensor::rms_norm: expected a DTensor with at least one dim");
  check_param("rms_norm", "weight", x, weight);
  const int64_t last = x.dim() - 1;
  PreparedOp p = prepare_op("rms_norm", fmt::format("w {}", weight.defined()), inputs_of(x, weight, DTensor()),
                            [last](const std::vector<const DTensorSpec*>& specs) { return normalize_rule(specs, last); });
  return wrap_result(p, dtr::rms_norm(p.locals[0], weight.defined() ? p.locals[1] : Tensor(), eps));
}

}  // namespace dtr::dtensor
