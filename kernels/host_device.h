// DTR_HOST_DEVICE: marks functions callable from host and CUDA device code alike
// (empty outside nvcc). Its own header so that light device-neutral headers can
// use it without pulling in the scalar types (and Eigen).
#pragma once

#if defined(__CUDACC__)
#define DTR_HOST_DEVICE __host__ __device__
#else
#define DTR_HOST_DEVICE
#endif
