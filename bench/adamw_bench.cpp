// One optimizer step of AdamW op by op (.fused = false) against its default fused
// kernel (one multi-threaded pass) on the CPU, f32, for 10M and 50M parameters split into
// tensors of mixed sizes, on 1 and 2 threads (or the counts given): ms/step and
// GB/s of optimizer state traffic, 28 bytes per parameter (param, grad, exp_avg,
// exp_avg_sq read = 16, param, exp_avg, exp_avg_sq written = 12). The yardstick
// is a plain memcpy on the same thread count, counted as read + write bytes
// (a memcpy's destination lines may also be read for ownership, uncounted; the
// optimizer writes only lines it has just read, so it can beat that figure).
//   build/dev/bench/dtr_adamw_bench [steps=5] [threads...=1 2]
#include "dtr/kernels/cpu/cpu_level.h"
#include "dtr/kernels/cpu/parallel.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/random.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A model-like mix: 4M-element matrices, a few 768 x 3072 ones, small vectors.
std::vector<dtr::Tensor> make_params(int64_t total) {
  std::vector<dtr::Tensor> params;
  int64_t left = total;
  const int64_t pattern[] = {4 << 20, 768, 768 * 3072, 768, 3072};
  for (size_t k = 0; left > 0; ++k) {
    const int64_t n = std::min(left, pattern[k % 5]);
    dtr::Tensor p = dtr::full({n}, 0.01);
    p.requires_grad_();
    p.set_grad(dtr::full({n}, 1e-3));
    params.push_back(p);
    left -= n;
  }
  return params;
}

// Best seconds per step over `steps` timed steps, after one untimed step that
// allocates the state.
double time_step(int64_t n, int steps, bool fused) {
  std::vector<dtr::Tensor> params = make_params(n);
  dtr::nn::optim::AdamW opt(params, dtr::nn::optim::AdamWOptions{.lr = 1e-4, .fused = fused});
  opt.step();
  double best = 1e30;
  for (int i = 0; i < steps; ++i) {
    auto t0 = Clock::now();
    opt.step();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

// Read + write GB/s of a memcpy of `bytes`, split across the current thread count.
double memcpy_gbps(size_t bytes, int reps) {
  std::unique_ptr<char[]> src(new char[bytes]), dst(new char[bytes]);
  std::memset(src.get(), 1, bytes);
  std::memset(dst.get(), 0, bytes);
  const auto blocks = static_cast<int64_t>(bytes >> 16);  // 64 KiB units
  auto copy = [&] {
    dtr::kernels::parallel_for(0, blocks, 1, [&](int64_t lo, int64_t hi) {
      std::memcpy(dst.get() + (lo << 16), src.get() + (lo << 16), static_cast<size_t>(hi - lo) << 16);
    });
  };
  copy();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    copy();
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * static_cast<double>(blocks << 16) / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dtr;
  const int steps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  std::vector<int> thread_counts;
  for (int i = 2; i < argc; ++i) thread_counts.push_back(std::max(1, std::atoi(argv[i])));
  if (thread_counts.empty()) thread_counts = {1, 2};
  const int64_t sizes[] = {10'000'000, 50'000'000};
  const double bytes_per_param = 28.0;

  fmt::print("AdamW step op by op vs fused, f32, best of {} steps; GB/s = 28 B/param / time; CPU kernels {}\n\n",
             steps, dtr::kernels::cpu::cpu_level_description());
  fmt::print("{:>8} {:>8} {:>12} {:>10} {:>12} {:>10} {:>8} {:>13}\n", "params", "threads",
             "AdamW ms", "AdamW GB/s", "Fused ms", "Fused GB/s", "speedup", "memcpy GB/s");
  for (int threads : thread_counts) {
    kernels::set_num_threads(threads);
    const double copy_rate = memcpy_gbps(size_t{256} << 20, 5);
    for (int64_t n : sizes) {
      const double ref = time_step(n, steps, false);
      const double fused = time_step(n, steps, true);
      const double bytes = bytes_per_param * static_cast<double>(n);
      fmt::print("{:>7}M {:>8} {:>12.1f} {:>10.2f} {:>12.1f} {:>10.2f} {:>7.1f}x {:>13.2f}\n",
                 n / 1'000'000, threads, 1e3 * ref, bytes / ref / 1e9, 1e3 * fused,
                 bytes / fused / 1e9, ref / fused, copy_rate);
    }
  }
  return 0;
}
