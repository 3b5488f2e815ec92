#include "dtr/kernels/cpu/parallel.h"

#include "dtr/kernels/cpu/denormals.h"

#define EIGEN_USE_THREADS
#include <unsupported/Eigen/CXX11/ThreadPool>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace dtr::kernels {

namespace {

int default_threads() {
  if (const char* env = std::getenv("DTR_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

struct Pool {
  std::mutex mutex;
  int threads = default_threads();
  std::unique_ptr<Eigen::ThreadPool> pool;  // threads - 1 workers; the caller is the last one

  Eigen::ThreadPool* get() {
    // Spinning: an idle worker polls its queue briefly (5000 tries, tens of
    // microseconds) before it sleeps, so the next op's chunk, usually that close
    // behind, starts without a futex wake-up and a trip through the scheduler.
    if (threads > 1 && !pool) {
      pool = std::make_unique<Eigen::ThreadPool>(threads - 1, /*allow_spinning=*/true);
    }
    return pool.get();
  }
};

Pool& global_pool() {
  static Pool p;
  return p;
}

thread_local bool t_in_parallel_region = false;

// How far the workers' chunks of one parallel_for have got.
struct ChunkProgress {
  std::atomic<int64_t> started{0}, finished{0};
};

// The caller, done with its own chunk, polls for the workers' chunks for up to
// kWaitSpin before it sleeps on the barrier: chunks of one op usually end within
// microseconds of each other, and a wake-up through a futex and the scheduler
// costs more than that (bench/parallel_bench.cpp: a pass over 64K floats on 2
// threads took 29-31 us when the caller slept at once, 5.2-5.5 us polling, on
// the Intel machine of bench/notes/cpu_levels.md). It polls only while
// every worker has started its chunk: one that has not is queued or not running
// (threads oversubscribed on few cores), and polling would take its core.
constexpr auto kWaitSpin = std::chrono::microseconds(30);

void await_workers(const ChunkProgress& progress, int64_t workers) {
  if (progress.started.load(std::memory_order_relaxed) < workers) return;
  const auto deadline = std::chrono::steady_clock::now() + kWaitSpin;
  for (int poll = 1; progress.finished.load(std::memory_order_acquire) < workers; ++poll) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
    if (poll % 32 == 0 && std::chrono::steady_clock::now() >= deadline) return;
  }
}

}  // namespace

int num_threads() { return global_pool().threads; }

void set_num_threads(int n) {
  Pool& p = global_pool();
  std::lock_guard lock(p.mutex);
  p.threads = std::max(1, n);
  p.pool.reset();
}

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  int64_t n = end - begin;
  if (n <= 0) return;
  Pool& p = global_pool();
  int64_t chunks = std::min<int64_t>(p.threads, (n + std::max<int64_t>(grain, 1) - 1) /
                                                    std::max<int64_t>(grain, 1));
  if (chunks <= 1 || t_in_parallel_region) {
    fn(begin, end);
    return;
  }
  Eigen::ThreadPool* pool;
  {
    std::lock_guard lock(p.mutex);
    pool = p.get();
  }
  int64_t per_chunk = (n + chunks - 1) / chunks;
  Eigen::Barrier barrier(static_cast<unsigned>(chunks - 1));
  ChunkProgress progress;  // counted by the workers before each notifies the barrier
  std::mutex error_mutex;
  std::exception_ptr error;  // the first exception a chunk threw, rethrown after all finish
  auto run_chunk = [&](int64_t c) {
    int64_t lo = begin + c * per_chunk;
    int64_t hi = std::min(end, lo + per_chunk);
    t_in_parallel_region = true;
    try {
      if (lo < hi) fn(lo, hi);
    } catch (...) {
      std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
    }
    t_in_parallel_region = false;
  };
  for (int64_t c = 1; c < chunks; ++c) {
    pool->Schedule([&, c] {
      progress.started.fetch_add(1, std::memory_order_relaxed);
      apply_flush_denormal_mode();  // the worker computes as the caller's thread does
      run_chunk(c);
      progress.finished.fetch_add(1, std::memory_order_release);
      barrier.Notify();
    });
  }
  run_chunk(0);
  await_workers(progress, chunks - 1);
  barrier.Wait();
  if (error) std::rethrow_exception(error);
}

void parallel_for_arrays(const int64_t* numels, size_t count,
                         const std::function<void(size_t, int64_t, int64_t)>& fn) {
  constexpr int64_t kBlock = 256;
  std::vector<int64_t> offsets(count + 1, 0);  // start of each array in the joint index space
  for (size_t k = 0; k < count; ++k) offsets[k + 1] = offsets[k] + numels[k];
  const int64_t total = offsets[count];
  if (total == 0) return;
  const int64_t blocks = (total + kBlock - 1) / kBlock;
  parallel_for(0, blocks, std::max<int64_t>(1, kParallelGrain / kBlock), [&](int64_t lo, int64_t hi) {
    int64_t begin = lo * kBlock;
    const int64_t end = std::min(hi * kBlock, total);
    // The last array starting at or before `begin`: the one holding it (empty ones are skipped).
    auto k = static_cast<size_t>(std::upper_bound(offsets.begin(), offsets.end(), begin) - offsets.begin() - 1);
    for (; begin < end; ++k) {
      const int64_t n = std::min(end, offsets[k + 1]) - begin;
      if (n > 0) fn(k, begin - offsets[k], n);
      begin += std::max<int64_t>(n, 0);
    }
  });
}

}  // namespace dtr::kernels
