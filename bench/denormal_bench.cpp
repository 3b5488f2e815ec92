// What flushing subnormals to zero (dtr/kernels/cpu/denormals.h) buys on this CPU: ms
// for an f32 elementwise multiply whose inputs and results are subnormal, and for
// a 512^3 f32 GEMM whose A is subnormal, with flushing off and on (best of 5 runs,
// all threads), and the same on normal inputs as the yardstick that flushing
// cannot change.
//   build/release/bench/dtr_denormal_bench
#include "dtr/kernels/cpu/cpu_level.h"
#include "dtr/kernels/cpu/denormals.h"
#include "dtr/kernels/cpu/elementwise.h"
#include "dtr/kernels/cpu/gemm.h"
#include "dtr/kernels/cpu/parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <vector>

namespace {

double best_ms(const std::function<void()>& run) {
  run();  // warm-up
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main() {
  using namespace dtr::kernels;
  const int64_t n = int64_t{1} << 24, m = 512;
  fmt::print("Subnormal operands with flushing off and on; {} threads, CPU kernels {}\n\n", num_threads(),
             cpu::cpu_level_description());
  fmt::print("{:<44} {:>10} {:>10} {:>8}\n", "", "off (ms)", "on (ms)", "off/on");
  for (const bool subnormal : {true, false}) {
    const float scale = subnormal ? std::ldexp(1.0f, -130) : 1.0f;
    std::vector<float> a(n, 1.5f * scale), b(n, 0.75f), out(n);
    const int64_t sizes[1] = {n}, strides[1] = {1};
    auto multiply = [&] {
      cpu::binary<float>(cpu::BinaryOp::mul, 1, sizes, a.data(), strides, b.data(), strides, out.data(), strides);
    };
    std::vector<float> ga(m * m, 0.5f * scale), gb(m * m, 0.25f), gc(m * m);
    auto gemm = [&] {
      cpu::gemm<float>(Transpose::no, Transpose::no, m, m, m, 1.0f, ga.data(), m, gb.data(), m, 0.0f, gc.data(), m);
    };
    for (const auto& [name, run] : {std::pair<const char*, std::function<void()>>{"elementwise multiply, 16M", multiply},
                                    {"GEMM 512^3", gemm}}) {
      set_flush_denormal(false);
      const double off = best_ms(run);
      set_flush_denormal(true);
      const double on = best_ms(run);
      set_flush_denormal(false);
      fmt::print("{:<44} {:>10.2f} {:>10.2f} {:>7.2f}x\n",
                 fmt::format("{} ({} inputs)", name, subnormal ? "subnormal" : "normal"), off, on, off / on);
    }
  }
  return 0;
}
