// The elementwise op codes shared by the CPU kernels (dtr/kernels/cpu/elementwise.h)
// and the CUDA kernels (dtr/kernels/cuda/elementwise.h), their names, and the type
// elementwise math runs in. Device-neutral and free of fmt, so that .cu files can
// include it.
#pragma once

#include "dtr/kernels/scalar_types.h"

#include <string_view>
#include <type_traits>

namespace dtr::kernels {

// The type elementwise math runs in for element type T: float for bf16 and f16
// (each result rounded once on store), T itself otherwise.
template <class T>
using opmath_t = std::conditional_t<is_half_v<T>, float, T>;

enum class UnaryOp {
  neg,
  abs,
  exp,
  log,
  sqrt,
  rsqrt,
  square,
  reciprocal,
  sin,
  cos,
  tanh,
  sigmoid,
  relu,
  gelu_tanh,  // x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
  gelu_erf,   // x * 0.5 * (1 + erf(x / sqrt(2)))
  silu,       // x * sigmoid(x)
};

enum class BinaryOp { add, sub, mul, div, pow, maximum, minimum };

enum class CompareOp { eq, ne, lt, le, gt, ge };

// Element tests for the checks integer ops need before they run.
enum class ElementTest { zero, negative };

// "neg", "gelu_tanh", ...
constexpr std::string_view unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg: return "neg";
    case UnaryOp::abs: return "abs";
    case UnaryOp::exp: return "exp";
    case UnaryOp::log: return "log";
    case UnaryOp::sqrt: return "sqrt";
    case UnaryOp::rsqrt: return "rsqrt";
    case UnaryOp::square: return "square";
    case UnaryOp::reciprocal: return "reciprocal";
    case UnaryOp::sin: return "sin";
    case UnaryOp::cos: return "cos";
    case UnaryOp::tanh: return "tanh";
    case UnaryOp::sigmoid: return "sigmoid";
    case UnaryOp::relu: return "relu";
    case UnaryOp::gelu_tanh: return "gelu_tanh";
    case UnaryOp::gelu_erf: return "gelu_erf";
    case UnaryOp::silu: return "silu";
  }
  return "unknown unary op";
}

// "add", ...
constexpr std::string_view binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return "add";
    case BinaryOp::sub: return "sub";
    case BinaryOp::mul: return "mul";
    case BinaryOp::div: return "div";
    case BinaryOp::pow: return "pow";
    case BinaryOp::maximum: return "maximum";
    case BinaryOp::minimum: return "minimum";
  }
  return "unknown binary op";
}

// "eq", ...
constexpr std::string_view compare_op_name(CompareOp op) {
  switch (op) {
    case CompareOp::eq: return "eq";
    case CompareOp::ne: return "ne";
    case CompareOp::lt: return "lt";
    case CompareOp::le: return "le";
    case CompareOp::gt: return "gt";
    case CompareOp::ge: return "ge";
  }
  return "unknown compare op";
}

// True for the ops whose gradient g * f'(s) has a one-pass kernel (unary_grad in
// dtr/kernels/cpu/elementwise.h and dtr/kernels/cuda/elementwise.h).
constexpr bool has_grad_kernel(UnaryOp op) {
  switch (op) {
    case UnaryOp::tanh:
    case UnaryOp::sigmoid:
    case UnaryOp::relu:
    case UnaryOp::silu:
    case UnaryOp::gelu_tanh:
    case UnaryOp::gelu_erf: return true;
    default: return false;
  }
}

// True for the ops whose gradient reads the forward's output y; the others read its input x.
constexpr bool grad_reads_output(UnaryOp op) {
  switch (op) {
    case UnaryOp::exp:
    case UnaryOp::sqrt:
    case UnaryOp::rsqrt:
    case UnaryOp::reciprocal:
    case UnaryOp::tanh:
    case UnaryOp::sigmoid:
    case UnaryOp::relu: return true;
    default: return false;
  }
}

// True for the ops defined on floating types only (everything but neg, abs, square, relu).
constexpr bool is_floating_only(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg:
    case UnaryOp::abs:
    case UnaryOp::square:
    case UnaryOp::relu: return false;
    default: return true;
  }
}

}  // namespace dtr::kernels
