// Elementwise ops: input checks, result allocation, broadcasting by expand() (stride-0
// views, never copies) and dispatch by dtype into the kernels of the operands' device:
// dtr/kernels/cpu/elementwise.h, or dtr/kernels/cuda/elementwise.h on the device's current
// stream in CUDA builds.
#include "dtr/tensor/ops/elementwise.h"

#include "dtr/kernels/cpu/elementwise.h"
#include "dtr/kernels/elementwise_ops.h"
#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise_backward.h"
#include "dtr/tensor/ops/op_checks.h"

#ifdef DTR_WITH_CUDA
#include "dtr/kernels/cuda/elementwise.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

#include <string_view>

namespace dtr {

namespace {

using kernels::BinaryOp;
using kernels::CompareOp;
using kernels::ElementTest;
using kernels::opmath_t;
using kernels::UnaryOp;

constexpr auto kKernels = ops::Kernels::cpu_and_cuda;

// The elementwise kernels of one device behind one interface, so that each op is
// written once: `k.binary(...)` takes the CPU kernel's arguments (the element type
// is deduced from the pointers), and the CUDA flavour adds its stream.
struct CpuKernels {
  template <class... A>
  void unary(A... a) const { kernels::cpu::unary(a...); }
  template <class... A>
  void binary(A... a) const { kernels::cpu::binary(a...); }
  template <class... A>
  void unary_grad(A... a) const { kernels::cpu::unary_grad(a...); }
  template <class... A>
  void add_scaled(A... a) const { kernels::cpu::add_scaled(a...); }
  template <class... A>
  void compare(A... a) const { kernels::cpu::compare(a...); }
  template <class... A>
  void where(A... a) const { kernels::cpu::where(a...); }
  template <class... A>
  bool any_element(A... a) const { return kernels::cpu::any_element(a...); }
};

#ifdef DTR_WITH_CUDA
struct CudaKernels {
  cudaStream_t stream;
  template <class... A>
  void unary(A... a) const { kernels::cuda::unary(a..., stream); }
  template <class... A>
  void binary(A... a) const { kernels::cuda::binary(a..., stream); }
  template <class... A>
  void unary_grad(A... a) const { kernels::cuda::unary_grad(a..., stream); }
  template <class... A>
  void add_scaled(A... a) const { kernels::cuda::add_scaled(a..., stream); }
  template <class... A>
  void compare(A... a) const { kernels::cuda::compare(a..., stream); }
  template <class... A>
  void where(A... a) const { kernels::cuda::where(a..., stream); }
  template <class... A>
  bool any_element(A... a) const { return kernels::cuda::any_element(a..., stream); }
};
#endif

// Calls fn(kernels) with the kernels of `device` (cpu or cuda; never meta). On cuda
// the device is made current and the kernels launch on its current stream.
template <class Fn>
decltype(auto) with_kernels(Device device, Fn&& fn) {
#ifdef DTR_WITH_CUDA
  if (device.is_cuda()) {
    cuda::DeviceGuard guard(device.index);
    return fn(CudaKernels{cuda::current_stream(device.index)});
  }
#endif
  DTR_INTERNAL_ASSERT(device.is_cpu(), "elementwise kernels on {}", device);
  return fn(CpuKernels{});
}

int ndim_of(const Shape& shape) { return static_cast<int>(shape.size()); }

bool is_integer(DType dtype) { return !is_floating(dtype); }

// True when some element of t (a cpu or cuda tensor) passes `test`.
bool any_element(ElementTest test, const Tensor& t) {
  if (t.numel() == 0) return false;
  return dispatch_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return with_kernels(t.device(), [&](auto k) {
      return k.any_element(test, static_cast<int>(t.dim()), t.sizes().data(), t.data<T>(),
                           t.strides().data());
    });
  });
}

// Integer div and pow reject divisors of zero and negative exponents before
// anything is written (on meta there is nothing to look at).
void check_integer_operand(std::string_view op, BinaryOp kind, const Tensor& rhs) {
  if (!is_integer(rhs.dtype()) || rhs.device().is_meta()) return;
  if (kind == BinaryOp::div) {
    DTR_CHECK(!any_element(ElementTest::zero, rhs),
              "{}: integer division by zero (the {} divisor of shape {} has a zero element)", op,
              rhs.dtype(), shape_str(rhs.sizes()));
  } else if (kind == BinaryOp::pow) {
    DTR_CHECK(!any_element(ElementTest::negative, rhs),
              "{}: integers to negative integer powers are not allowed (the {} exponent of shape "
              "{} has a negative element)",
              op, rhs.dtype(), shape_str(rhs.sizes()));
  }
}

// A view of one tensor that another operand may read while it is written: only
// the exact same elements at the same indices are safe to read in place.
bool same_view(const Tensor& a, const Tensor& b) {
  return a.storage().is_same(b.storage()) && a.storage_offset() == b.storage_offset() &&
         a.sizes() == b.sizes() && a.strides() == b.strides();
}

Tensor unary_op(std::string_view op, UnaryOp kind, const Tensor& x) {
  Device device = ops::check_device(op, {&x}, kKernels);
  Tensor out;
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    out = empty(x.sizes(), {.dtype = x.dtype(), .device = device});
    if (device.is_meta() || out.numel() == 0) return;
    with_kernels(device, [&](auto k) {
      k.unary(kind, ndim_of(x.sizes()), x.sizes().data(), x.data<T>(), x.strides().data(),
              out.data<T>(), out.strides().data());
    });
  };
  if (kernels::is_floating_only(kind)) {
    dispatch_floating(x.dtype(), op, run);
  } else {
    dispatch_dtype(x.dtype(), run);
  }
  ops::record_unary_grad(kind, x, out);
  return out;
}

// Device, dtype and broadcast checks of a binary op; returns the result shape.
Shape check_binary(std::string_view op, const Tensor& a, const Tensor& b) {
  ops::check_device(op, {&a, &b}, kKernels);
  ops::check_same_dtype(op, {&a, &b});
  return ops::broadcast_shapes(op, a.sizes(), b.sizes());
}

Tensor binary_op(std::string_view op, BinaryOp kind, const Tensor& a, const Tensor& b) {
  Shape shape = check_binary(op, a, b);
  check_integer_operand(op, kind, b);
  Tensor out = empty(shape, {.dtype = a.dtype(), .device = a.device()});
  if (!out.device().is_meta() && out.numel() != 0) {
    Tensor ae = a.expand(shape), be = b.expand(shape);
    dispatch_dtype(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      with_kernels(out.device(), [&](auto k) {
        k.binary(kind, ndim_of(shape), shape.data(), ae.data<T>(), ae.strides().data(),
                 be.data<T>(), be.strides().data(), out.data<T>(), out.strides().data());
      });
    });
  }
  ops::record_binary_grad(kind, a, b, out);
  return out;
}

Tensor compare_op(std::string_view op, CompareOp kind, const Tensor& a, const Tensor& b) {
  Shape shape = check_binary(op, a, b);
  Tensor out = empty(shape, {.dtype = DType::u8, .device = a.device()});
  if (out.device().is_meta() || out.numel() == 0) return out;
  Tensor ae = a.expand(shape), be = b.expand(shape);
  dispatch_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_kernels(out.device(), [&](auto k) {
      k.compare(kind, ndim_of(shape), shape.data(), ae.data<T>(), ae.strides().data(),
                be.data<T>(), be.strides().data(), out.data<uint8_t>(), out.strides().data());
    });
  });
  return out;
}

// A Scalar operand becomes a 0-d tensor of the other operand's dtype and device.
Tensor scalar_like(Scalar value, const Tensor& like) {
  DTR_CHECK(like.defined(), "scalar operand paired with an undefined tensor");
  return scalar_tensor(value, like.dtype(), like.device());
}

void check_alpha(std::string_view op, DType dtype, Scalar alpha) {
  DTR_CHECK(is_floating(dtype) || alpha.is_integral(),
            "{}: alpha must be an integer for {} tensors, got {}", op, dtype, alpha.to_double());
}

// self = self (op) other, or self + alpha * other when `alpha` is given for add_.
const Tensor& inplace_op(std::string_view op, BinaryOp kind, const Tensor& self,
                         const Tensor& other_in, Scalar alpha = 1) {
  Shape shape = check_binary(op, self, other_in);
  DTR_CHECK(!autograd::needs_grad({&other_in}),
            "{}: the operand of shape {} requires grad, and autograd does not record in-place "
            "ops; use the out-of-place op, or detach() the operand",
            op, shape_str(other_in.sizes()));
  autograd::check_inplace(op, self);
  DTR_CHECK(shape == self.sizes(),
            "{}: the result of broadcasting self of shape {} with other of shape {} has shape {}, "
            "but an in-place op must keep self's shape",
            op, shape_str(self.sizes()), shape_str(other_in.sizes()), shape_str(shape));
  for (int64_t d = 0; d < self.dim(); ++d) {
    DTR_CHECK(self.stride(d) != 0 || self.size(d) <= 1,
              "{}: self (shape {}, strides {}) has several elements at one memory location (an "
              "expanded view); write into a contiguous copy instead",
              op, shape_str(self.sizes()), shape_str(self.strides()));
  }
  check_alpha(op, self.dtype(), alpha);
  check_integer_operand(op, kind, other_in);
  if (self.device().is_meta() || self.numel() == 0) return self;
  // An operand that overlaps self other than element-for-element is read from a copy,
  // so no element is read after it has been overwritten.
  Tensor other = other_in;
  if (other.storage().is_same(self.storage()) && !same_view(self, other)) other = other.clone();
  Tensor oe = other.expand(shape);
  const bool scaled = kind == BinaryOp::add && alpha.to_double() != 1.0;
  dispatch_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int nd = ndim_of(shape);
    T* s = self.data<T>();
    with_kernels(self.device(), [&](auto k) {
      if (scaled) {
        k.add_scaled(nd, shape.data(), s, self.strides().data(), oe.data<T>(),
                     oe.strides().data(), alpha.to<opmath_t<T>>(), s, self.strides().data());
      } else {
        k.binary(kind, nd, shape.data(), s, self.strides().data(), oe.data<T>(),
                 oe.strides().data(), s, self.strides().data());
      }
    });
  });
  return self;
}

}  // namespace

namespace ops {

Tensor activation_grad(UnaryOp kind, const Tensor& g, const Tensor& s) {
  const std::string_view op = kernels::unary_op_name(kind);
  DTR_INTERNAL_ASSERT(kernels::has_grad_kernel(kind), "{}: no gradient kernel", op);
  const Device device = ops::check_device(op, {&g, &s}, kKernels);
  ops::check_same_dtype(op, {&g, &s});
  DTR_INTERNAL_ASSERT(g.sizes() == s.sizes(), "{} gradient: g {} and saved {} differ in shape", op,
                      shape_str(g.sizes()), shape_str(s.sizes()));
  Tensor out = empty(g.sizes(), {.dtype = g.dtype(), .device = device});
  if (device.is_meta() || out.numel() == 0) return out;
  dispatch_floating(g.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_kernels(device, [&](auto k) {
      k.unary_grad(kind, ndim_of(g.sizes()), g.sizes().data(), g.data<T>(), g.strides().data(),
                   s.data<T>(), s.strides().data(), out.data<T>(), out.strides().data());
    });
  });
  return out;
}

}  // namespace ops

// ---------------------------------------------------------------- unary

Tensor neg(const Tensor& x) { return unary_op("neg", UnaryOp::neg, x); }
Tensor abs(const Tensor& x) { return unary_op("abs", UnaryOp::abs, x); }
Tensor exp(const Tensor& x) { return unary_op("exp", UnaryOp::exp, x); }
Tensor log(const Tensor& x) { return unary_op("log", UnaryOp::log, x); }
Tensor sqrt(const Tensor& x) { return unary_op("sqrt", UnaryOp::sqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary_op("rsqrt", UnaryOp::rsqrt, x); }
Tensor square(const Tensor& x) { return unary_op("square", UnaryOp::square, x); }
Tensor reciprocal(const Tensor& x) { return unary_op("reciprocal", UnaryOp::reciprocal, x); }
Tensor sin(const Tensor& x) { return unary_op("sin", UnaryOp::sin, x); }
Tensor cos(const Tensor& x) { return unary_op("cos", UnaryOp::cos, x); }
Tensor tanh(const Tensor& x) { return unary_op("tanh", UnaryOp::tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary_op("sigmoid", UnaryOp::sigmoid, x); }
Tensor relu(const Tensor& x) { return unary_op("relu", UnaryOp::relu, x); }
Tensor silu(const Tensor& x) { return unary_op("silu", UnaryOp::silu, x); }

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  return unary_op("gelu", approximate == GeluApproximation::tanh ? UnaryOp::gelu_tanh
                                                                  : UnaryOp::gelu_erf,
                  x);
}

// ---------------------------------------------------------------- binary

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) {
  if (alpha.to_double() == 1.0) return binary_op("add", BinaryOp::add, a, b);
  Shape shape = check_binary("add", a, b);
  check_alpha("add", a.dtype(), alpha);
  Tensor out = empty(shape, {.dtype = a.dtype(), .device = a.device()});
  if (!out.device().is_meta() && out.numel() != 0) {
    Tensor ae = a.expand(shape), be = b.expand(shape);
    dispatch_dtype(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      with_kernels(out.device(), [&](auto k) {
        k.add_scaled(ndim_of(shape), shape.data(), ae.data<T>(), ae.strides().data(),
                     be.data<T>(), be.strides().data(), alpha.to<opmath_t<T>>(), out.data<T>(),
                     out.strides().data());
      });
    });
  }
  ops::record_binary_grad(BinaryOp::add, a, b, out, alpha);
  return out;
}

#define DTR_DEFINE_BINARY(name, kind)                                         \
  Tensor name(const Tensor& a, Scalar b) {                                    \
    return binary_op(#name, kind, a, scalar_like(b, a));                      \
  }                                                                           \
  Tensor name(Scalar a, const Tensor& b) {                                    \
    return binary_op(#name, kind, scalar_like(a, b), b);                      \
  }
DTR_DEFINE_BINARY(add, BinaryOp::add)
DTR_DEFINE_BINARY(sub, BinaryOp::sub)
DTR_DEFINE_BINARY(mul, BinaryOp::mul)
DTR_DEFINE_BINARY(div, BinaryOp::div)
DTR_DEFINE_BINARY(pow, BinaryOp::pow)
DTR_DEFINE_BINARY(maximum, BinaryOp::maximum)
DTR_DEFINE_BINARY(minimum, BinaryOp::minimum)
#undef DTR_DEFINE_BINARY

Tensor sub(const Tensor& a, const Tensor& b) { return binary_op("sub", BinaryOp::sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op("mul", BinaryOp::mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_op("div", BinaryOp::div, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary_op("pow", BinaryOp::pow, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary_op("maximum", BinaryOp::maximum, a, b);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary_op("minimum", BinaryOp::minimum, a, b);
}

Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
Tensor operator+(Scalar a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
Tensor operator-(Scalar a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
Tensor operator*(Scalar a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
Tensor operator/(Scalar a, const Tensor& b) { return div(a, b); }

// ---------------------------------------------------------------- comparisons

#define DTR_DEFINE_COMPARE(name)                                                  \
  Tensor name(const Tensor& a, const Tensor& b) {                                 \
    return compare_op(#name, CompareOp::name, a, b);                              \
  }                                                                               \
  Tensor name(const Tensor& a, Scalar b) {                                        \
    return compare_op(#name, CompareOp::name, a, scalar_like(b, a));              \
  }
DTR_DEFINE_COMPARE(eq)
DTR_DEFINE_COMPARE(ne)
DTR_DEFINE_COMPARE(lt)
DTR_DEFINE_COMPARE(le)
DTR_DEFINE_COMPARE(gt)
DTR_DEFINE_COMPARE(ge)
#undef DTR_DEFINE_COMPARE

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Device device = ops::check_device("where", {&cond, &a, &b}, kKernels);
  DTR_CHECK(cond.dtype() == DType::u8, "where: cond must have dtype u8, got {} (shape {})",
            cond.dtype(), shape_str(cond.sizes()));
  DTR_CHECK(a.dtype() == b.dtype(),
            "where: a and b must have the same dtype, got {} and {} (cast with .to(dtype) first)",
            a.dtype(), b.dtype());
  Shape shape = ops::broadcast_shapes(
      "where", ops::broadcast_shapes("where", cond.sizes(), a.sizes()), b.sizes());
  Tensor out = empty(shape, {.dtype = a.dtype(), .device = device});
  if (!device.is_meta() && out.numel() != 0) {
    Tensor ce = cond.expand(shape), ae = a.expand(shape), be = b.expand(shape);
    dispatch_dtype(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      with_kernels(device, [&](auto k) {
        k.where(ndim_of(shape), shape.data(), ce.data<uint8_t>(), ce.strides().data(),
                ae.data<T>(), ae.strides().data(), be.data<T>(), be.strides().data(),
                out.data<T>(), out.strides().data());
      });
    });
  }
  ops::record_where_grad(cond, a, b, out);
  return out;
}

// ---------------------------------------------------------------- in place

const Tensor& add_(const Tensor& self, const Tensor& other, Scalar alpha) {
  return inplace_op("add_", BinaryOp::add, self, other, alpha);
}
const Tensor& add_(const Tensor& self, Scalar other) {
  return inplace_op("add_", BinaryOp::add, self, scalar_like(other, self));
}
const Tensor& sub_(const Tensor& self, const Tensor& other) {
  return inplace_op("sub_", BinaryOp::sub, self, other);
}
const Tensor& sub_(const Tensor& self, Scalar other) {
  return inplace_op("sub_", BinaryOp::sub, self, scalar_like(other, self));
}
const Tensor& mul_(const Tensor& self, const Tensor& other) {
  return inplace_op("mul_", BinaryOp::mul, self, other);
}
const Tensor& mul_(const Tensor& self, Scalar other) {
  return inplace_op("mul_", BinaryOp::mul, self, scalar_like(other, self));
}
const Tensor& div_(const Tensor& self, const Tensor& other) {
  return inplace_op("div_", BinaryOp::div, self, other);
}
const Tensor& div_(const Tensor& self, Scalar other) {
  return inplace_op("div_", BinaryOp::div, self, scalar_like(other, self));
}

Tensor cast(const Tensor& t, DType dtype) {
  DTR_CHECK(t.defined(), "cast: the tensor is undefined");
  if (!is_floating(dtype)) {
    // An integer result never requires grad: nothing to record.
    NoGradGuard no_grad;
    return t.to(dtype);
  }
  return t.to(dtype);
}

}  // namespace dtr
