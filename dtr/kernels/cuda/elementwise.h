// Elementwise math on a CUDA device: the twins of dtr/kernels/cpu/elementwise.h (unary
// ops, binary ops, add_scaled, comparisons, where() and any_element()), with the
// same arguments plus the stream to launch on, last. Pointers are device pointers
// on the current device; the host arrays `sizes` and `*_strides` are read during
// the call only.
//
// Layout rules are the CPU kernels': one iteration shape, element strides per
// operand (0 on broadcast dims), the output may alias an input at the same index
// (in-place ops), any other overlap is the caller's to avoid. Dims contiguous for
// every operand are merged first (StridedIndexer). When the result is one run of
// elements in which every operand is contiguous or a broadcast scalar and every
// contiguous pointer is 16-byte aligned, each thread moves 16 bytes at a time
// (4 floats, 8 bf16, ...); a 1-D run that is misaligned or strided is indexed by
// multiplying, and only the general N-D case divides.
//
// Numerics are the CPU kernels' (see dtr/kernels/cpu/elementwise.h): math in
// opmath_t<T> (float for bf16 and f16, rounded once on store, bf16 NaN stored as
// the CPU stores it), wrapping integer arithmetic, truncating integer division
// (a zero divisor gives 0: callers reject it first with any_element), NaN-
// propagating maximum and minimum, and sigmoid, silu and both gelus in the same
// overflow-safe forms. Results that are one IEEE operation (add, sub, mul, div,
// square, reciprocal, sqrt, rsqrt as 1/sqrt, neg, abs, relu, maximum, minimum,
// comparisons, where, add_scaled as a rounded multiply then a rounded add) and
// every integer result are bit-identical to the CPU kernels, except for the
// payload of NaNs. The transcendentals use CUDA's libdevice functions (expf,
// erfcf, powf, ...), whose documented errors are a few ulp, as glibc's are; the
// GPU tests accept f32/f64 results within 4 ulp of the CPU result (16 ulp for
// pow and gelu_erf, 64 for gelu_tanh, whose exp(-2u) amplifies the rounding of u
// by up to |2u|), and bf16/f16 results within 1 ulp.
//
// Floating-only unary ops throw dtr::Error for integer T (callers reject them
// first). any_element() synchronises `stream` to bring its answer back.
#pragma once

#include "dtr/kernels/elementwise_ops.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace dtr::kernels::cuda {

// out[i] = op(x[i]).
template <class T>
void unary(UnaryOp op, int ndim, const int64_t* sizes, const T* x, const int64_t* x_strides,
           T* out, const int64_t* out_strides, cudaStream_t stream);

// out[i] = op(a[i], b[i]).
template <class T>
void binary(BinaryOp op, int ndim, const int64_t* sizes, const T* a, const int64_t* a_strides,
            const T* b, const int64_t* b_strides, T* out, const int64_t* out_strides,
            cudaStream_t stream);

// out[i] = g[i] * f'(s[i]) for f = op, one of has_grad_kernel(op), with s the
// forward's output where grad_reads_output(op), else its input (dtr/kernels/cpu/elementwise.h).
template <class T>
void unary_grad(UnaryOp op, int ndim, const int64_t* sizes, const T* g, const int64_t* g_strides,
                const T* s, const int64_t* s_strides, T* out, const int64_t* out_strides,
                cudaStream_t stream);

// out[i] = a[i] + alpha * b[i], computed in opmath_t<T> (the product rounded, then
// the sum: never fused) and rounded once to T.
template <class T>
void add_scaled(int ndim, const int64_t* sizes, const T* a, const int64_t* a_strides, const T* b,
                const int64_t* b_strides, opmath_t<T> alpha, T* out, const int64_t* out_strides,
                cudaStream_t stream);

// out[i] = op(a[i], b[i]) ? 1 : 0.
template <class T>
void compare(CompareOp op, int ndim, const int64_t* sizes, const T* a, const int64_t* a_strides,
             const T* b, const int64_t* b_strides, uint8_t* out, const int64_t* out_strides,
             cudaStream_t stream);

// out[i] = cond[i] != 0 ? a[i] : b[i] (the chosen element's bits are copied).
template <class T>
void where(int ndim, const int64_t* sizes, const uint8_t* cond, const int64_t* cond_strides,
           const T* a, const int64_t* a_strides, const T* b, const int64_t* b_strides, T* out,
           const int64_t* out_strides, cudaStream_t stream);

// True when some element x[i] passes `test`. Runs on `stream` and waits for it (a
// 4-byte flag allocated stream-ordered, then copied back to the host).
template <class T>
bool any_element(ElementTest test, int ndim, const int64_t* sizes, const T* x,
                 const int64_t* x_strides, cudaStream_t stream);

}  // namespace dtr::kernels::cuda
