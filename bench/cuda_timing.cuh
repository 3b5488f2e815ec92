// median_ms: the median GPU time of a piece of work queued on a stream, measured
// with CUDA events after a few untimed warm-up runs; CopyShareTable: rows of such
// times printed as GB/s and as a share of the first row's (a device-to-device copy).
// Shared by the CUDA benchmarks.
#pragma once

#include "dtr/kernels/cuda/cuda_check.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
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

// Timed rows, each with the bytes its work reads and writes; the first row is the
// copy that the others' bandwidth is shown as a share of.
class CopyShareTable {
 public:
  explicit CopyShareTable(cudaStream_t stream) : stream_(stream) {}

  void add(std::string name, double bytes, const std::function<void()>& run) {
    rows_.push_back({std::move(name), bytes, median_ms(run, stream_)});
  }

  void print() const {
    const double copy_gbs = rows_.at(0).bytes / rows_.at(0).ms / 1e6;
    std::printf("%-52s %9s %9s %10s\n", "kernel", "ms", "GB/s", "% of copy");
    for (const Row& row : rows_) {
      const double gbs = row.bytes / row.ms / 1e6;
      std::printf("%-52s %9.3f %9.1f %9.1f%%\n", row.name.c_str(), row.ms, gbs, 100.0 * gbs / copy_gbs);
    }
  }

 private:
  struct Row {
    std::string name;
    double bytes;
    float ms;
  };
  cudaStream_t stream_;
  std::vector<Row> rows_;
};

}  // namespace dtr::bench
