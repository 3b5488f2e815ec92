// DTR_HOST_DEVICE: marks functions callable from host and CUDA device code alike
// (empty outside nvcc); DTR_FORCE_INLINE inlines such a function into every caller
// (for per-element math that a loop must inline to vectorize); DTR_UNROLL unrolls a
// loop in such a function under nvcc. Its
// own header so that light device-neutral headers can use it without pulling in the
// scalar types (and Eigen).
#pragma once

#if defined(__CUDACC__)
#define DTR_HOST_DEVICE __host__ __device__
#else
#define DTR_HOST_DEVICE
#endif

#if defined(__CUDACC__)
#define DTR_FORCE_INLINE __forceinline__
#else
#define DTR_FORCE_INLINE __attribute__((always_inline)) inline
#endif

// DTR_UNROLL: `#pragma unroll` for the loop after it under nvcc; nothing for the host
// compiler (which warns about the pragma).
#if defined(__CUDACC__)
#define DTR_UNROLL _Pragma("unroll")
#else
#define DTR_UNROLL
#endif
