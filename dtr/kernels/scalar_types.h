// The element types kernels compute on, and the type each one accumulates in.
//
// bf16 and f16 are Eigen's bfloat16 and half: 16-bit storage types whose
// conversions from float round to nearest even and keep NaN and Inf, and which
// are usable in host and CUDA code alike. Kernels never do arithmetic in a half
// type: they load into acc_t<T> (float), compute, and round once on store.
#pragma once

#include "dtr/kernels/host_device.h"

#include <Eigen/Core>

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace dtr {

using bf16 = Eigen::bfloat16;
using f16 = Eigen::half;

template <class T>
struct Accumulate {
  using type = T;
};
template <>
struct Accumulate<bf16> {
  using type = float;
};
template <>
struct Accumulate<f16> {
  using type = float;
};
template <>
struct Accumulate<uint8_t> {
  using type = int64_t;
};
template <>
struct Accumulate<int32_t> {
  using type = int64_t;
};
template <class T>
using acc_t = typename Accumulate<T>::type;

template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;
template <class T>
inline constexpr bool is_floating_v = std::is_floating_point_v<T> || is_half_v<T>;

// double -> float rounded to odd (an inexact result gets its last mantissa bit
// set). Rounding that float once more to bf16/f16 (nearest even) then gives the
// correctly rounded result, which double -> float -> half directly would not.
DTR_HOST_DEVICE inline float double_to_float_round_odd(double x) {
#if defined(__CUDA_ARCH__)
  float f = __double2float_rz(x);
  if (static_cast<double>(f) != x && x == x) f = __uint_as_float(__float_as_uint(f) | 1u);
#else
  float f = static_cast<float>(x);
  if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);  // toward zero
  if (static_cast<double>(f) != x && x == x) f = std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
#endif
  return f;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// float -> bf16 bits rounded to nearest even by the hardware (cvt.rn.bf16.f32: one
// instruction where Eigen's portable rounding takes about eight integer ones), with
// NaN made the quiet NaN of its sign (0x7FC0 | sign) as Eigen and the CPU kernels
// make it; the instruction alone gives 0x7FFF. Same bits as Eigen for every input.
__device__ inline uint16_t float_to_bf16_bits(float v) {
  uint16_t bits;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(v));
  return v == v ? bits : static_cast<uint16_t>(((__float_as_uint(v) >> 16) & 0x8000u) | 0x7FC0u);
}
#endif

// Converts between any two element types (through float for the half types),
// rounding once.
template <class To, class From>
DTR_HOST_DEVICE inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (is_half_v<From>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (is_half_v<To> && std::is_same_v<From, double>) {
    return convert<To>(double_to_float_round_odd(v));
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  } else if constexpr (std::is_same_v<To, bf16>) {
    return bf16(Eigen::bfloat16_impl::raw_uint16_to_bfloat16(float_to_bf16_bits(static_cast<float>(v))));
#endif
  } else if constexpr (is_half_v<To>) {
    return To(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace dtr

// X(T) for every element type: for explicit template instantiations in kernel files.
#define DTR_FOR_EACH_SCALAR(X) X(float) X(double) X(::dtr::bf16) X(::dtr::f16) X(int32_t) X(int64_t) X(uint8_t)
#define DTR_FOR_EACH_FLOATING(X) X(float) X(double) X(::dtr::bf16) X(::dtr::f16)
