// Correctly rounded single operations in float and double (__fmul_rn and friends):
// never contracted into FMAs, IEEE division and square root, subnormals kept. Kernels
// that must round exactly as their CPU twins do (the fused optimizers, random fills,
// dropout, rotary embedding) spell their arithmetic with them.
#pragma once

namespace dtr::kernels::cuda {

__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ inline double sub_rn(double a, double b) { return __dsub_rn(a, b); }
__device__ inline float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline double div_rn(double a, double b) { return __ddiv_rn(a, b); }
__device__ inline float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ inline double sqrt_rn(double a) { return __dsqrt_rn(a); }

}  // namespace dtr::kernels::cuda
