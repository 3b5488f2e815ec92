// GEMM benchmark: square f32 products C = A . B, in GFLOP/s, of
//   (a) Eigen directly: a single-threaded Map<Matrix> product over the tensors' buffers,
//   (b) dtr::matmul with kernels::set_num_threads(1), and its ratio to (a),
//   (c) dtr::matmul with the default thread count (DTR_NUM_THREADS or the core count).
// Each figure is the best of several timed runs after one warm-up run.
#include "dtr/kernels/cpu/cpu_level.h"
#include "dtr/kernels/cpu/parallel.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/matmul.h"

#include <fmt/format.h>
#include <Eigen/Core>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

double seconds_of(const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Best time of each function, run in turns (so a change in machine load hits all
// of them alike) until each has run at least 5 times and 2 s in total has passed.
std::vector<double> best_times(const std::vector<std::function<void()>>& fns) {
  for (const auto& fn : fns) fn();  // warm-up: page in buffers, start the thread pool
  std::vector<double> best(fns.size(), INFINITY);
  double total = 0;
  for (int rep = 0; rep < 100 && (rep < 5 || total < 2.0); ++rep) {
    for (size_t i = 0; i < fns.size(); ++i) {
      const double t = seconds_of(fns[i]);
      best[i] = std::min(best[i], t);
      total += t;
    }
  }
  return best;
}

dtr::Tensor random_matrix(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n * n));
  for (float& x : v) x = dist(rng);
  return dtr::from_vector(v, {n, n});
}

}  // namespace

int main() {
  const int default_threads = dtr::kernels::num_threads();
  fmt::print("f32 C = A . B, square, row-major; best of >= 5 runs after a warm-up\n");
  fmt::print("(a): Eigen {}.{}.{} built into this file, SIMD: {}; (b), (c): dtr's CPU kernels {}; "
             "default threads: {}\n\n",
             EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION,
             Eigen::SimdInstructionSetsInUse(), dtr::kernels::cpu::cpu_level_description(),
             default_threads);
  fmt::print("{:>6} | {:>13} | {:>14} | {:>9} | {:>14} | {:>8}\n", "size", "(a) Eigen 1T",
             "(b) matmul 1T", "(b)/(a)", "(c) matmul " + std::to_string(default_threads) + "T",
             "(c)/(b)");
  fmt::print("{:->6}-+-{:->13}-+-{:->14}-+-{:->9}-+-{:->14}-+-{:->8}\n", "", "", "", "", "", "");

  for (int64_t n : {512, 1024, 2048}) {
    const dtr::Tensor a = random_matrix(n, 1), b = random_matrix(n, 2);
    std::vector<float> c_eigen(static_cast<size_t>(n * n));
    Eigen::Map<const RowMajor> ma(a.data<float>(), n, n), mb(b.data<float>(), n, n);
    Eigen::Map<RowMajor> mc(c_eigen.data(), n, n);
    dtr::Tensor c_op;

    dtr::kernels::set_num_threads(1);
    const std::vector<double> single =
        best_times({[&] { mc.noalias() = ma * mb; }, [&] { c_op = dtr::matmul(a, b); }});
    // The op must compute the same product: compare it with Eigen's result.
    Eigen::Map<const RowMajor> op_result(c_op.data<float>(), n, n);
    const float max_diff = (op_result - mc).cwiseAbs().maxCoeff();

    dtr::kernels::set_num_threads(default_threads);
    const std::vector<double> multi = best_times({[&] { c_op = dtr::matmul(a, b); }});

    const double flops =
        2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
    const double eigen = flops / single[0] * 1e-9, op1 = flops / single[1] * 1e-9,
                 opn = flops / multi[0] * 1e-9;
    fmt::print("{:>6} | {:>8.1f} GF/s | {:>9.1f} GF/s | {:>8.1f}% | {:>9.1f} GF/s | {:>7.2f}x{}\n",
               n, eigen, op1, 100.0 * op1 / eigen, opn, opn / op1,
               max_diff > 1e-3f ? fmt::format("  (op differs from Eigen by {})", max_diff) : "");
  }
  return 0;
}
