// A small parallel-for over a persistent Eigen thread pool, used by the CPU
// kernels when the work is large enough to pay for a hand-off (never for tiny
// tensors). The pool does not spin, so ranks oversubscribed on few cores under
// mpirun do not burn each other's time. The thread count defaults to the
// hardware concurrency, or DTR_NUM_THREADS when set; set_num_threads() changes it.
// A parallel_for called from inside a worker runs inline (no nested parallelism).
#pragma once

#include <cstdint>
#include <functional>

namespace dtr::kernels {

int num_threads();
void set_num_threads(int n);

// Calls fn(chunk_begin, chunk_end) over [begin, end) split into at most
// num_threads() chunks of at least `grain` indices each.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

// Elements below which elementwise kernels stay on one thread.
inline constexpr int64_t kParallelGrain = 32768;

}  // namespace dtr::kernels
