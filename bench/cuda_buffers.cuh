// Device buffers for the CUDA benchmarks: filled with hashed values (cheap, the same
// on every run, no host round trip) and freed by their owner. Shared by the CUDA benches.
#pragma once

#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/scalar_types.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

namespace dtr::bench {

// p[i] = a value in [lo, hi) hashed from i and seed.
template <class T>
__global__ void fill_hashed(T* p, int64_t n, uint32_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed ^ static_cast<uint32_t>(i >> 32);
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = convert<T>(lo + static_cast<float>(h >> 8) * ((hi - lo) / 16777216.0f));
  }
}

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};
template <class T>
using DeviceBuffer = std::unique_ptr<T[], CudaFree>;

// n uninitialised elements of device memory.
template <class T>
DeviceBuffer<T> device_empty(int64_t n) {
  T* p = nullptr;
  DTR_CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(n) * sizeof(T)));
  return DeviceBuffer<T>(p);
}

// n elements hashed into [lo, hi) (filled on the default stream before it returns).
template <class T>
DeviceBuffer<T> device_random(int64_t n, uint32_t seed, float lo = -4.0f, float hi = 4.0f) {
  DeviceBuffer<T> buffer = device_empty<T>(n);
  fill_hashed<<<4096, 256>>>(buffer.get(), n, seed, lo, hi);
  DTR_CUDA_CHECK_LAUNCH();
  DTR_CUDA_CHECK(cudaDeviceSynchronize());
  return buffer;
}

}  // namespace dtr::bench
