// Internal to the CUDA elementwise kernels: the wrappers that apply the shared
// per-element functors (dtr/kernels/elementwise_functors.h, the same ones the CPU
// kernels use) to stored values, loading half types into float and rounding once
// on store.
#pragma once

#include "dtr/kernels/cuda/elementwise_loops.cuh"
#include "dtr/kernels/elementwise_functors.h"

#include <cstdint>
#include <type_traits>

namespace dtr::kernels::cuda::detail {

// The per-element math is shared with the CPU kernels.
using namespace ::dtr::kernels::ew;

// --- wrappers over stored values ---

// S -> S: loads every operand into Elem<S>::math, applies F, rounds once on store.
template <class S, class F>
struct OnStored {
  F f;
  template <class... A>
  __device__ S operator()(A... x) const {
    return Elem<S>::store(f(Elem<S>::load(x)...));
  }
};

// S, S -> uint8_t 0 or 1.
template <class S, class P>
struct CompareStored {
  P pred;
  __device__ uint8_t operator()(S a, S b) const {
    return pred(Elem<S>::load(a), Elem<S>::load(b)) ? uint8_t{1} : uint8_t{0};
  }
};

// cond ? a : b, copying the chosen element's bits.
struct Select {
  template <class S>
  __device__ S operator()(uint8_t cond, S a, S b) const { return cond != 0 ? a : b; }
};

}  // namespace dtr::kernels::cuda::detail
