// Scalar: a number passed to an op (fill value, scalar operand), kept as an
// int64 or a double so that integer values survive exactly.
#pragma once

#include "dtr/kernels/scalar_types.h"

#include <cstdint>
#include <type_traits>

namespace dtr {

class Scalar {
 public:
  template <class T>
    requires(std::is_arithmetic_v<T>)
  Scalar(T v) {  // NOLINT: implicit by design, like PyTorch's Scalar
    if constexpr (std::is_floating_point_v<T>) {
      is_integral_ = false;
      d_ = static_cast<double>(v);
    } else {
      is_integral_ = true;
      i_ = static_cast<int64_t>(v);
    }
  }
  Scalar(bf16 v) : Scalar(static_cast<float>(v)) {}
  Scalar(f16 v) : Scalar(static_cast<float>(v)) {}

  bool is_integral() const { return is_integral_; }
  double to_double() const { return is_integral_ ? static_cast<double>(i_) : d_; }
  int64_t to_int() const { return is_integral_ ? i_ : static_cast<int64_t>(d_); }

  // The value as element type T (integers convert exactly, floats round once).
  template <class T>
  T to() const {
    if constexpr (is_floating_v<T>) {
      return convert<T>(to_double());
    } else {
      return static_cast<T>(is_integral_ ? i_ : static_cast<int64_t>(d_));
    }
  }

 private:
  bool is_integral_ = false;
  int64_t i_ = 0;
  double d_ = 0;
};

}  // namespace dtr
