// The backward nodes of the elementwise ops, beside the formulas they apply. Each
// node saves only what its formula reads (exp its output, mul the other operand,
// add nothing), saved as detached views so that a saved output does not hold its
// own grad_fn alive, and frees them in release_saved().
#include "dtr/tensor/ops/elementwise_backward.h"

#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"

#include <cctype>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dtr::ops {

namespace {

using autograd::Node;
using autograd::SavedTensor;
using kernels::BinaryOp;
using kernels::UnaryOp;

// "gelu_tanh" -> "GeluTanhBackward".
std::string node_name(std::string_view op) {
  std::string name;
  bool upper = true;
  for (char c : op) {
    if (c == '_') {
      upper = true;
      continue;
    }
    name += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return name + "Backward";
}

SavedTensor save(const Tensor& t) { return SavedTensor(t.detach()); }

// The dtype a multi-step formula computes in: f32 for bf16 and f16, so that the
// gradient is rounded once (when cast back to the input's dtype).
Tensor opmath(const Tensor& t) { return is_half(t.dtype()) ? t.to(DType::f32) : t; }

Tensor scalar_like(double value, const Tensor& like) {
  return scalar_tensor(value, like.dtype(), like.device());
}

// -1, 0 or 1 by the sign of x (0 at 0, like PyTorch's abs backward).
Tensor sign(const Tensor& x) { return cast(gt(x, 0), x.dtype()) - cast(lt(x, 0), x.dtype()); }

enum class Saves { nothing, input, output };

Saves unary_saves(UnaryOp kind) {
  if (kind == UnaryOp::neg) return Saves::nothing;
  return kernels::grad_reads_output(kind) ? Saves::output : Saves::input;
}

// Formulas of one rounding step need no f32 detour for bf16 and f16.
bool unary_needs_opmath(UnaryOp kind) {
  switch (kind) {
    case UnaryOp::neg:
    case UnaryOp::abs:
    case UnaryOp::exp:
    case UnaryOp::log:
    case UnaryOp::sqrt:
    case UnaryOp::square: return false;
    default: return true;
  }
}

// g · dy/dx for y = kind(x); `s` is x or y, as unary_saves() says.
Tensor unary_grad(UnaryOp kind, const Tensor& g, const Tensor& s) {
  switch (kind) {
    case UnaryOp::neg: return neg(g);
    case UnaryOp::abs: return g * sign(s);
    case UnaryOp::exp: return g * s;                            // y
    case UnaryOp::log: return g / s;                            // 1 / x
    case UnaryOp::sqrt: return g / (s * 2);                     // 1 / (2y)
    case UnaryOp::rsqrt: return g * (s * square(s)) * -0.5;     // -y³ / 2
    case UnaryOp::square: return g * (s * 2);                   // 2x
    case UnaryOp::reciprocal: return neg(g) * square(s);        // -y²
    case UnaryOp::sin: return g * cos(s);
    case UnaryOp::cos: return neg(g) * sin(s);
    case UnaryOp::tanh:
    case UnaryOp::sigmoid:
    case UnaryOp::relu:
    case UnaryOp::silu:
    case UnaryOp::gelu_tanh:
    case UnaryOp::gelu_erf: break;  // one-pass kernels: activation_grad()
  }
  DTR_INTERNAL_ASSERT(false, "no backward for unary op {}", kernels::unary_op_name(kind));
  return {};
}

class UnaryBackward final : public Node {
 public:
  UnaryBackward(UnaryOp kind, SavedTensor saved) : kind_(kind), saved_(std::move(saved)) {}
  std::string name() const override { return node_name(kernels::unary_op_name(kind_)); }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    const Tensor& g = grads[0];
    if (unary_saves(kind_) == Saves::nothing) return {unary_grad(kind_, g, Tensor())};
    Tensor s = saved_.unpack(*this);
    if (kernels::has_grad_kernel(kind_)) return {activation_grad(kind_, g, s)};
    if (!unary_needs_opmath(kind_)) return {unary_grad(kind_, g, s)};
    return {unary_grad(kind_, opmath(g), opmath(s)).to(g.dtype())};
  }
  void release_saved() override { saved_.release(); }

 private:
  UnaryOp kind_;
  SavedTensor saved_;
};

// The gradient of maximum/minimum for one operand: none where it lost, half where
// it tied, all where it won (or where either side is NaN, like PyTorch).
Tensor routed(const Tensor& g, const Tensor& lost, const Tensor& tied) {
  return where(lost, scalar_like(0, g), where(tied, g * 0.5, g));
}

class BinaryBackward final : public Node {
 public:
  struct Saved {
    SavedTensor a, b, out;
  };
  BinaryBackward(BinaryOp kind, Scalar alpha, Shape a_shape, Shape b_shape, DType dtype, Saved saved)
      : kind_(kind),
        alpha_(alpha),
        a_shape_(std::move(a_shape)),
        b_shape_(std::move(b_shape)),
        dtype_(dtype),
        saved_(std::move(saved)) {}
  std::string name() const override { return node_name(kernels::binary_op_name(kind_)); }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    const Tensor& g = grads[0];
    const bool want_a = needs_input_grad(0), want_b = needs_input_grad(1);
    Tensor ga, gb;
    switch (kind_) {
      case BinaryOp::add:
        ga = g;
        if (want_b) gb = alpha_.to_double() == 1.0 ? g : g * alpha_;
        break;
      case BinaryOp::sub:
        ga = g;
        if (want_b) gb = neg(g);
        break;
      case BinaryOp::mul:
        if (want_a) ga = g * b();
        if (want_b) gb = g * a();
        break;
      case BinaryOp::div: {
        Tensor go = opmath(g), bo = opmath(b());
        if (want_a) ga = go / bo;
        if (want_b) gb = neg(go) * opmath(a()) / square(bo);  // -g a / b²
        break;
      }
      case BinaryOp::pow: pow_grads(g, want_a, want_b, ga, gb); break;
      case BinaryOp::maximum:
      case BinaryOp::minimum: {
        const bool is_max = kind_ == BinaryOp::maximum;
        Tensor av = a(), bv = b(), tied = eq(av, bv);
        if (want_a) ga = routed(g, is_max ? lt(av, bv) : gt(av, bv), tied);
        if (want_b) gb = routed(g, is_max ? gt(av, bv) : lt(av, bv), tied);
        break;
      }
    }
    return {finish(want_a, ga, a_shape_), finish(want_b, gb, b_shape_)};
  }

  void release_saved() override {
    saved_.a.release();
    saved_.b.release();
    saved_.out.release();
  }

 private:
  Tensor a() const { return saved_.a.unpack(*this); }
  Tensor b() const { return saved_.b.unpack(*this); }

  // d(a^b)/da = b·a^(b-1) (0 where b == 0, even at a == 0);
  // d(a^b)/db = a^b·log(a) (0 where a == 0 and b >= 0, where the limit is 0).
  void pow_grads(const Tensor& g, bool want_a, bool want_b, Tensor& ga, Tensor& gb) const {
    Tensor go = opmath(g), av = opmath(a()), bv = opmath(b());
    Tensor zero = scalar_like(0, go);
    if (want_a) ga = where(eq(bv, 0), zero, go * bv * pow(av, bv - 1));
    if (want_b) {
      Tensor out = opmath(saved_.out.unpack(*this));
      Tensor limit_zero = mul(eq(av, 0), ge(bv, 0));  // u8: both conditions hold
      gb = where(limit_zero, zero, go * out * log(av));
    }
  }

  // Sums a broadcast gradient back to the input's shape, in the input's dtype.
  Tensor finish(bool wanted, const Tensor& grad, const Shape& shape) const {
    if (!wanted || !grad.defined()) return {};
    return autograd::sum_to(grad, shape).to(dtype_);
  }

  BinaryOp kind_;
  Scalar alpha_;
  Shape a_shape_, b_shape_;
  DType dtype_;
  Saved saved_;
};

// where(cond, a, b): the gradient goes to a where cond holds and to b elsewhere.
class WhereBackward final : public Node {
 public:
  WhereBackward(SavedTensor cond, Shape a_shape, Shape b_shape)
      : cond_(std::move(cond)), a_shape_(std::move(a_shape)), b_shape_(std::move(b_shape)) {}
  std::string name() const override { return "WhereBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    const Tensor& g = grads[0];
    Tensor cond = cond_.unpack(*this), zero = scalar_like(0, g);
    Tensor ga, gb;
    if (needs_input_grad(0)) ga = autograd::sum_to(where(cond, g, zero), a_shape_);
    if (needs_input_grad(1)) gb = autograd::sum_to(where(cond, zero, g), b_shape_);
    return {ga, gb};
  }
  void release_saved() override { cond_.release(); }

 private:
  SavedTensor cond_;
  Shape a_shape_, b_shape_;
};

}  // namespace

void record_unary_grad(UnaryOp kind, const Tensor& x, const Tensor& out) {
  if (!autograd::needs_grad({&x})) return;
  SavedTensor saved;
  switch (unary_saves(kind)) {
    case Saves::nothing: break;
    case Saves::input: saved = save(x); break;
    case Saves::output: saved = save(out); break;
  }
  autograd::set_history(std::make_shared<UnaryBackward>(kind, std::move(saved)), {&x}, {&out});
}

void record_binary_grad(BinaryOp kind, const Tensor& a, const Tensor& b, const Tensor& out,
                        Scalar alpha) {
  if (!autograd::needs_grad({&a, &b})) return;
  const bool want_a = autograd::needs_grad({&a}), want_b = autograd::needs_grad({&b});
  BinaryBackward::Saved saved;
  switch (kind) {
    case BinaryOp::add:
    case BinaryOp::sub: break;
    case BinaryOp::mul:
      if (want_b) saved.a = save(a);
      if (want_a) saved.b = save(b);
      break;
    case BinaryOp::div:
      if (want_b) saved.a = save(a);
      saved.b = save(b);
      break;
    case BinaryOp::pow:
      saved.a = save(a);
      saved.b = save(b);
      if (want_b) saved.out = save(out);
      break;
    case BinaryOp::maximum:
    case BinaryOp::minimum:
      saved.a = save(a);
      saved.b = save(b);
      break;
  }
  auto node = std::make_shared<BinaryBackward>(kind, alpha, a.sizes(), b.sizes(), a.dtype(),
                                               std::move(saved));
  autograd::set_history(node, {&a, &b}, {&out});
}

void record_where_grad(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (!autograd::needs_grad({&a, &b})) return;
  auto node = std::make_shared<WhereBackward>(save(cond), a.sizes(), b.sizes());
  autograd::set_history(node, {&a, &b}, {&out});
}

}  // namespace dtr::ops
