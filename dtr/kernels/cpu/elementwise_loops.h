// Internal to the elementwise kernels: the loops that apply a per-element
// functor (dtr/kernels/elementwise_functors.h) over strided operands. A functor takes
// and returns values in opmath_t<T>; the loops load (converting half types to
// float) and store (rounding once). Rows where every
// operand is contiguous, or where one input is a broadcast scalar, get plain
// indexed loops the compiler vectorises; other rows index through their strides.
// bf16 loads and stores use branch-free bit operations (bit-identical to Eigen's
// conversions) so that those loops vectorise for bf16 too.
#pragma once

#include "dtr/kernels/cpu/elementwise.h"
#include "dtr/kernels/cpu/strided_loop.h"
#include "dtr/kernels/scalar_types.h"

#include <array>
#include <bit>
#include <cstdint>
#include <type_traits>

namespace dtr::kernels::cpu::detail {

// --- element loads and stores ---

// The element at p, in the type math runs in. bf16 -> float is exact: the bits move up
// 16 places (read through the raw `value` member so that the loops vectorise).
template <class T>
opmath_t<T> load(const T* p) {
  if constexpr (std::is_same_v<T, bf16>) {
    return std::bit_cast<float>(static_cast<uint32_t>(p->value) << 16);
  } else {
    return convert<opmath_t<T>>(*p);
  }
}

// Writes v to p as element type Out, rounding once. float -> bf16 rounds to nearest even
// and turns NaN into the quiet NaN of the same sign, exactly as Eigen does, but without
// branches.
template <class Out, class C>
void store(Out* p, C v) {
  if constexpr (std::is_same_v<Out, bf16> && std::is_same_v<C, float>) {
    const auto u = std::bit_cast<uint32_t>(v);
    const auto rounded = static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    const auto nan = static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7FC0u);
    p->value = (u & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded;
  } else {
    *p = convert<Out>(v);
  }
}

// --- loops ---

// out[i] = f(x[i]).
template <class In, class Out, class F>
void map1(int ndim, const int64_t* sizes, const In* x, const int64_t* x_strides, Out* out,
          const int64_t* out_strides, F f) {
  for_each_row<2>(ndim, sizes, {out_strides, x_strides},
                  [&](const std::array<int64_t, 2>& off, int64_t n,
                      const std::array<int64_t, 2>& inc) {
                    Out* o = out + off[0];
                    const In* xi = x + off[1];
                    if (inc[0] == 1 && inc[1] == 1) {
                      for (int64_t i = 0; i < n; ++i) store(o + i, f(load(xi + i)));
                      return;
                    }
                    for (int64_t i = 0; i < n; ++i) {
                      store(o + i * inc[0], f(load(xi + i * inc[1])));
                    }
                  });
}

// out[i] = f(a[i], b[i]).
template <class In, class Out, class F>
void map2(int ndim, const int64_t* sizes, const In* a, const int64_t* a_strides, const In* b,
          const int64_t* b_strides, Out* out, const int64_t* out_strides, F f) {
  using C = opmath_t<In>;
  for_each_row<3>(
      ndim, sizes, {out_strides, a_strides, b_strides},
      [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& inc) {
        Out* o = out + off[0];
        const In* ai = a + off[1];
        const In* bi = b + off[2];
        if (inc[0] == 1 && inc[1] == 1 && inc[2] == 1) {
          for (int64_t i = 0; i < n; ++i) store(o + i, f(load(ai + i), load(bi + i)));
        } else if (inc[0] == 1 && inc[1] == 1 && inc[2] == 0) {
          const C bv = load(bi);
          for (int64_t i = 0; i < n; ++i) store(o + i, f(load(ai + i), bv));
        } else if (inc[0] == 1 && inc[1] == 0 && inc[2] == 1) {
          const C av = load(ai);
          for (int64_t i = 0; i < n; ++i) store(o + i, f(av, load(bi + i)));
        } else {
          for (int64_t i = 0; i < n; ++i) {
            const C x = load(ai + i * inc[1]);
            const C y = load(bi + i * inc[2]);
            store(o + i * inc[0], f(x, y));
          }
        }
      });
}

}  // namespace dtr::kernels::cpu::detail
