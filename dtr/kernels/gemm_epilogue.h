// GemmEpilogue: what a GEMM (dtr/kernels/cpu/gemm.h, dtr/kernels/cuda/gemm.h) does to each
// element of C on its way out, so that a Linear layer's bias and activation cost no
// extra pass over its output:
//   v         = alpha * (op(A) . op(B))[i, j] + beta * C[i, j] + bias[j]
//   pre[i, j] = round(v)               (optional: the pre-activation the backward needs)
//   C[i, j]   = round(act(round(v)))
// The activation reads v rounded to the element type and is the elementwise op's own
// functor (dtr/kernels/elementwise_functors.h), so C is gelu(pre) as the elementwise op
// computes it (bit for bit on the CPU; on CUDA up to how nvcc contracts the same
// expression into FMAs), and the gradient taken from pre is the gradient of what was
// computed. Without an
// activation C[i, j] = round(v): one rounding, the bias added at full precision.
// v itself is a float sum of up to three terms: the CPU rounds each product and sum,
// CUDA may contract alpha * acc + beta * C (and the bias add) into FMAs, so v can differ
// by an f32 rounding, which reaches C only at a rounding tie of its element type.
// Without a product (k == 0 or alpha == 0) the first term is +0 on both.
// bias is one row of n elements shared by every row and batch entry of C; pre has C's
// leading dim and batch stride and must not overlap A, B or C.
#pragma once

#include "dtr/kernels/elementwise_functors.h"
#include "dtr/kernels/host_device.h"

#include <cstdint>

namespace dtr::kernels {

enum class GemmActivation : uint8_t { none, gelu_tanh, gelu_erf };

template <class T>
struct GemmEpilogue {
  const T* bias = nullptr;  // [n], or null
  GemmActivation activation = GemmActivation::none;
  T* pre = nullptr;  // where round(v) goes when there is an activation, or null

  bool trivial() const { return bias == nullptr && activation == GemmActivation::none; }
  // This epilogue with pre dropped when there is no activation (pre is then never written).
  GemmEpilogue normalized() const {
    GemmEpilogue e = *this;
    if (activation == GemmActivation::none) e.pre = nullptr;
    return e;
  }
};

// act(x) in the compute type C (float, or double for double GEMMs).
template <class C>
DTR_HOST_DEVICE inline C apply_gemm_activation(GemmActivation act, C x) {
  switch (act) {
    case GemmActivation::gelu_tanh: return ew::GeluTanh{}(x);
    case GemmActivation::gelu_erf: return ew::GeluErf{}(x);
    default: return x;
  }
}

}  // namespace dtr::kernels
