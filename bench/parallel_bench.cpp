// What a hand-off to the CPU thread pool costs: an elementwise pass (y = a * x + y,
// f32) through kernels::parallel_for on all threads, against the same loop on the
// calling thread alone, at the sizes of a GPT-2 124M step's small ops (256 x 256,
// 256 x 1024, 256 x 4096 floats at B=4, T=64). Each figure is the best of 10
// batches of 2000 back-to-back passes, per pass; "hand-off" is the parallel time
// less the serial time divided by the thread count (what an ideal split would take).
//   build/release/bench/dtr_parallel_bench
#include "dtr/kernels/cpu/parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// Best microseconds per call of `pass`, over 10 batches of 2000 calls, after a warm-up.
double best_us_per_pass(const std::function<void()>& pass) {
  constexpr int kBatch = 2000;
  for (int i = 0; i < 100; ++i) pass();
  double best = 1e30;
  for (int batch = 0; batch < 10; ++batch) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kBatch; ++i) pass();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count() / kBatch);
  }
  return best * 1e6;
}

void axpy(const float* x, float* y, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) y[i] = 1.0001f * x[i] + y[i];
}

}  // namespace

int main() {
  const int threads = dtr::kernels::num_threads();
  fmt::print("y = a * x + y (f32) through parallel_for on {} threads against one thread; us per pass\n\n",
             threads);
  fmt::print("{:>10} | {:>10} | {:>10} | {:>8} | {:>9}\n", "floats", "1 thread", "parallel", "speedup", "hand-off");
  fmt::print("{:->10}-+-{:->10}-+-{:->10}-+-{:->8}-+-{:->9}\n", "", "", "", "", "");
  for (const int64_t n : {int64_t{65536}, int64_t{262144}, int64_t{1048576}}) {
    std::vector<float> x(static_cast<size_t>(n), 1.0f), y(static_cast<size_t>(n), 0.0f);
    const double serial = best_us_per_pass([&] { axpy(x.data(), y.data(), 0, n); });
    const double parallel = best_us_per_pass([&] {
      dtr::kernels::parallel_for(0, n, dtr::kernels::kParallelGrain,
                                 [&](int64_t lo, int64_t hi) { axpy(x.data(), y.data(), lo, hi); });
    });
    fmt::print("{:>10} | {:>10.2f} | {:>10.2f} | {:>7.2f}x | {:>9.2f}\n", n, serial, parallel, serial / parallel,
               parallel - serial / threads);
  }
}
