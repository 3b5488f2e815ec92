// A small parallel-for over a persistent Eigen thread pool, used by the CPU
// kernels when the work is large enough to pay for a hand-off (never for tiny
// tensors). An idle worker, and the caller waiting for the workers' chunks, poll
// for tens of microseconds before they sleep, so that back-to-back ops skip a
// wake-up through the scheduler, while ranks oversubscribed on few cores under
// mpirun burn little of each other's time. The thread count defaults to the
// hardware concurrency, or DTR_NUM_THREADS when set; set_num_threads() changes it.
// A parallel_for called from inside a worker runs inline (no nested parallelism).
#pragma once

#include <cstddef>
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

// The elements of `count` arrays (numels[k] elements each) as one joint index space,
// split across threads in runs cut at most every 256 elements (1 KiB of f32), each a
// contiguous run that the hardware prefetcher streams well: calls fn(k, offset, n) for
// elements [offset, offset + n) of array k, every element exactly once. For the
// multi-tensor optimizers, whose small tensors would make poor tasks on their own.
void parallel_for_arrays(const int64_t* numels, size_t count,
                         const std::function<void(size_t, int64_t, int64_t)>& fn);

}  // namespace dtr::kernels
