// The CPU activation kernels (forward and gradient), f32, contiguous, on all
// threads: GB/s of the bytes each pass must move (forward: x read, y written;
// gradient: g and the saved tensor read, the result written) against a memcpy of
// the same bytes on the same threads, the yardstick of a pass that only moves
// memory. A ratio near 1 means the activation costs what its memory traffic
// costs; far below 1, the arithmetic (a call per element into the C library's
// exp, say) is what limits it. Sizes: one GPT-2 124M MLP activation at B=4, T=64
// (256 x 3072), and 16M elements (out of every cache).
//   build/release/bench/dtr_activation_bench [reps=20]
#include "dtr/kernels/cpu/cpu_level.h"
#include "dtr/kernels/cpu/elementwise.h"
#include "dtr/kernels/cpu/parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using dtr::kernels::UnaryOp;

// Best seconds of `reps` runs of `pass`, after one untimed run.
double best_seconds(int reps, const std::function<void()>& pass) {
  pass();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    pass();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

// Seconds of a memcpy of `bytes` split across the threads in 64 KiB units.
double memcpy_seconds(size_t bytes, int reps) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  const auto units = static_cast<int64_t>((bytes + 65535) >> 16);
  return best_seconds(reps, [&] {
    dtr::kernels::parallel_for(0, units, 1, [&](int64_t lo, int64_t hi) {
      const size_t begin = static_cast<size_t>(lo) << 16;
      const size_t end = std::min(bytes, static_cast<size_t>(hi) << 16);
      std::memcpy(dst.data() + begin, src.data() + begin, end - begin);
    });
  });
}

struct Activation {
  const char* name;
  UnaryOp op;
};

}  // namespace

int main(int argc, char** argv) {
  namespace cpu = dtr::kernels::cpu;
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  const Activation activations[] = {{"exp", UnaryOp::exp},           {"sigmoid", UnaryOp::sigmoid},
                                    {"silu", UnaryOp::silu},         {"gelu tanh", UnaryOp::gelu_tanh},
                                    {"gelu erf", UnaryOp::gelu_erf}, {"tanh", UnaryOp::tanh}};
  fmt::print("CPU activations, f32, {} threads, CPU kernels {}, best of {} passes\n",
             dtr::kernels::num_threads(), cpu::cpu_level_description(), reps);
  fmt::print("{:>10} {:>10} {:>9} {:>10} {:>10} {:>10} {:>10}\n", "elements", "op", "pass",
             "ms", "GB/s", "memcpy GB/s", "ratio");
  for (const int64_t n : {int64_t{256} * 3072, int64_t{16} << 20}) {
    std::mt19937 rng(0);
    std::uniform_real_distribution<float> uniform(-6.0f, 6.0f);
    std::vector<float> x(static_cast<size_t>(n)), g(static_cast<size_t>(n)), out(static_cast<size_t>(n));
    for (float& v : x) v = uniform(rng);
    for (float& v : g) v = uniform(rng);
    const int64_t stride = 1;
    for (const Activation& a : activations) {
      const bool has_grad = a.op != UnaryOp::exp;
      for (const bool grad : {false, true}) {
        if (grad && !has_grad) continue;
        const double bytes = (grad ? 12.0 : 8.0) * static_cast<double>(n);
        const double seconds = best_seconds(reps, [&] {
          if (grad) {
            cpu::unary_grad<float>(a.op, 1, &n, g.data(), &stride, x.data(), &stride, out.data(), &stride);
          } else {
            cpu::unary<float>(a.op, 1, &n, x.data(), &stride, out.data(), &stride);
          }
        });
        const double copy = bytes / memcpy_seconds(static_cast<size_t>(bytes / 2), reps) / 1e9;
        const double rate = bytes / seconds / 1e9;
        fmt::print("{:>10} {:>10} {:>9} {:>10.3f} {:>10.2f} {:>11.2f} {:>10.2f}\n", n, a.name,
                   grad ? "gradient" : "forward", 1e3 * seconds, rate, copy, rate / copy);
      }
    }
  }
  return 0;
}
