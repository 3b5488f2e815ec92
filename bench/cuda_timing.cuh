// median_ms: the median GPU time of a piece of work queued on a stream, measured
// with CUDA events after a few untimed warm-up runs. Shared by the CUDA benchmarks.
#pragma once

#include "kernels/cuda/cuda_check.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

namespace dtr::bench {

// Median milliseconds of run() (which queues its work on `stream`) over `runs` timed calls.
template <class F>
float median_ms(F&& run, cudaStream_t stream, int warmup = 3, int runs = 20) {
  for (int i = 0; i < warmup; ++i) run();
  cudaEvent_t start, stop;
  DTR_CUDA_CHECK(cudaEventCreate(&start));
  DTR_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int i = 0; i < runs; ++i) {
    DTR_CUDA_CHECK(cudaEventRecord(start, stream));
    run();
    DTR_CUDA_CHECK(cudaEventRecord(stop, stream));
    DTR_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    DTR_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  DTR_CUDA_CHECK(cudaEventDestroy(start));
  DTR_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace dtr::bench
