// Backward of matmul, mm, bmm, addmm and linear. For out = a . b with upstream gradient g:
//   grad_a = g . b^T,  grad_b = a^T . g
// (transposes of the last two dims), summed back over the batch dims an operand
// was broadcast along (autograd::sum_to) and reshaped to the operand's shape, so
// 1-D operands get 1-D gradients. addmm adds grad_c = beta * g summed to c's
// shape and scales the product's gradients by alpha. The formulas are tensor ops,
// so they run on whichever device the tensors are on.
#include "dtr/tensor/ops/matmul_backward.h"

#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/matmul.h"
#include "dtr/tensor/ops/reduce.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dtr::ops {

namespace {

using autograd::SavedTensor;

// Saved form of an operand: a detached view (no reference back into the graph),
// or nothing when no gradient needs it.
SavedTensor save_if(bool needed, const Tensor& t) {
  return needed ? SavedTensor(t.detach()) : SavedTensor();
}

// True when t is a matrix stored transposed (column-major), like weight.t() in a
// Linear. Its gradient is produced in that layout too, so the transposing view it
// came from hands its owner a contiguous gradient, not one that must be gathered
// through strides into the parameter's layout.
bool stored_transposed(const Tensor& t) {
  return t.dim() == 2 && t.size(0) > 1 && t.size(1) > 1 && t.stride(0) == 1 && t.stride(1) >= t.size(0);
}

// g . b^T and a^T . g for a [..., m, k], b [..., k, n], g [..., m, n], each summed
// to its operand's shape, in the operand's layout where it is a transposed matrix.
// When b is one matrix shared by every batch entry of a (a Linear layer), grad_b
// is one [k, rows] . [rows, n] product over all rows.
Tensor product_grad_a(const Tensor& g, const Tensor& b, const Shape& a_shape, bool a_transposed) {
  if (a_transposed && g.dim() == 2) return mm(b, g.t()).t();  // ([k, n] . [n, m])^T
  return autograd::sum_to(matmul(g, b.transpose(-1, -2)), a_shape);
}

Tensor product_grad_b(const Tensor& g, const Tensor& a, const Shape& b_shape, bool b_transposed) {
  if (b_shape.size() == 2 && (g.dim() > 2 || b_transposed)) {
    const int64_t rows = numel_of(Shape(g.sizes().begin(), g.sizes().end() - 1));
    const Tensor a2 = a.reshape({rows, a.size(-1)}), g2 = g.reshape({rows, g.size(-1)});
    if (b_transposed) return mm(g2.t(), a2).t();  // ([n, rows] . [rows, k])^T
    return mm(a2.t(), g2);
  }
  return autograd::sum_to(matmul(a.transpose(-1, -2), g), b_shape);
}

// matmul, mm and bmm: one formula, since mm and bmm are matmul's 2-D and equal-batch
// 3-D cases. 1-D operands are promoted as in the forward ([k] -> [1, k] for a,
// [k, 1] for b) and g gets the dims the forward dropped back.
class MatmulBackward final : public autograd::Node {
 public:
  MatmulBackward(std::string name, const Tensor& a, const Tensor& b, bool need_a, bool need_b)
      : name_(std::move(name)),
        a_shape_(a.sizes()),
        b_shape_(b.sizes()),
        a_transposed_(stored_transposed(a)),
        b_transposed_(stored_transposed(b)),
        a_(save_if(need_b, a)),
        b_(save_if(need_a, b)) {}

  std::string name() const override { return name_; }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    const bool a_1d = a_shape_.size() == 1, b_1d = b_shape_.size() == 1;
    Tensor g = with_gemm_aligned_rows(grads[0]);
    if (b_1d) g = g.unsqueeze(-1);
    if (a_1d) g = g.unsqueeze(-2);
    const Shape a2_shape = a_1d ? Shape{1, a_shape_[0]} : a_shape_;
    const Shape b2_shape = b_1d ? Shape{b_shape_[0], 1} : b_shape_;
    std::vector<Tensor> out(2);
    if (needs_input_grad(0)) {
      Tensor b = b_.unpack(*this);
      out[0] = product_grad_a(g, b_1d ? b.unsqueeze(1) : b, a2_shape, a_transposed_).reshape(a_shape_);
    }
    if (needs_input_grad(1)) {
      Tensor a = a_.unpack(*this);
      out[1] = product_grad_b(g, a_1d ? a.unsqueeze(0) : a, b2_shape, b_transposed_).reshape(b_shape_);
    }
    return out;
  }

  void release_saved() override {
    a_.release();
    b_.release();
  }

 private:
  std::string name_;
  Shape a_shape_, b_shape_;
  bool a_transposed_, b_transposed_;  // stored_transposed(a), stored_transposed(b)
  SavedTensor a_, b_;
};

class AddmmBackward final : public autograd::Node {
 public:
  AddmmBackward(const Tensor& c, const Tensor& a, const Tensor& b, Scalar beta, Scalar alpha,
                bool need_a, bool need_b)
      : c_shape_(c.sizes()), beta_(beta), alpha_(alpha), a_(save_if(need_b, a)), b_(save_if(need_a, b)) {}

  std::string name() const override { return "AddmmBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    const Tensor& g = grads[0];
    std::vector<Tensor> out(3);
    if (needs_input_grad(0)) out[0] = autograd::sum_to(scaled(g, beta_), c_shape_);
    if (needs_input_grad(1)) out[1] = scaled(mm(g, b_.unpack(*this).t()), alpha_);
    if (needs_input_grad(2)) out[2] = scaled(mm(a_.unpack(*this).t(), g), alpha_);
    return out;
  }

  void release_saved() override {
    a_.release();
    b_.release();
  }

 private:
  static Tensor scaled(const Tensor& t, Scalar s) { return s.to_double() == 1 ? t : mul(t, s); }

  Shape c_shape_;
  Scalar beta_, alpha_;
  SavedTensor a_, b_;
};

// out = x . weight^T + bias, x [..., in], weight [out, in], bias [out] or none; with
// g2 and x2 the rows of g and x: grad_x = g . weight, grad_weight = g2^T . x2 (made
// contiguous [out, in] by the GEMM, no transposed copy), grad_bias = g2 summed over rows.
class LinearBackward final : public autograd::Node {
 public:
  LinearBackward(const Tensor& x, const Tensor& weight, bool has_bias, bool need_x, bool need_weight)
      : x_shape_(x.sizes()), has_bias_(has_bias), x_(save_if(need_weight, x)), weight_(save_if(need_x, weight)) {}

  std::string name() const override { return "LinearBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    const Tensor g = with_gemm_aligned_rows(grads[0]);
    const int64_t out_features = g.size(-1);
    const int64_t rows = numel_of(Shape(g.sizes().begin(), g.sizes().end() - 1));  // also when out_features == 0
    std::vector<Tensor> out(has_bias_ ? 3 : 2);
    const Tensor g2 = g.reshape({rows, out_features});
    // The bias first: a reduction over rows may take a transient copy of g (the cpu's
    // reduce transposes), best made before the other gradients exist.
    if (has_bias_ && needs_input_grad(2)) out[2] = sum(g2, {0});
    if (needs_input_grad(0)) out[0] = matmul(g, weight_.unpack(*this)).reshape(x_shape_);
    if (needs_input_grad(1)) {
      const Tensor x = x_.unpack(*this);
      out[1] = mm(g2.t(), x.reshape({rows, x.size(-1)}));
    }
    return out;
  }

  void release_saved() override {
    x_.release();
    weight_.release();
  }

 private:
  Shape x_shape_;
  bool has_bias_;
  SavedTensor x_, weight_;
};

void record_product(const char* name, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (!autograd::needs_grad({&a, &b})) return;
  auto node = std::make_shared<MatmulBackward>(name, a, b, autograd::needs_grad({&a}),
                                               autograd::needs_grad({&b}));
  autograd::set_history(node, {&a, &b}, {&out});
}

}  // namespace

void record_matmul_backward(const Tensor& a, const Tensor& b, const Tensor& out) {
  record_product("MatmulBackward", a, b, out);
}

void record_mm_backward(const Tensor& a, const Tensor& b, const Tensor& out) {
  record_product("MmBackward", a, b, out);
}

void record_bmm_backward(const Tensor& a, const Tensor& b, const Tensor& out) {
  record_product("BmmBackward", a, b, out);
}

void record_linear_backward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out) {
  if (!autograd::needs_grad({&x, &weight, &bias})) return;
  auto node = std::make_shared<LinearBackward>(x, weight, bias.defined(), autograd::needs_grad({&x}),
                                               autograd::needs_grad({&weight}));
  if (bias.defined()) {
    autograd::set_history(node, {&x, &weight, &bias}, {&out});
  } else {
    autograd::set_history(node, {&x, &weight}, {&out});
  }
}

void record_addmm_backward(const Tensor& c, const Tensor& a, const Tensor& b, Scalar beta,
                           Scalar alpha, const Tensor& out) {
  if (!autograd::needs_grad({&c, &a, &b})) return;
  auto node = std::make_shared<AddmmBackward>(c, a, b, beta, alpha, autograd::needs_grad({&a}),
                                              autograd::needs_grad({&b}));
  autograd::set_history(node, {&c, &a, &b}, {&out});
}

}  // namespace dtr::ops
