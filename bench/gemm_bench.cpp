// GEMM benchmark, f32, in GFLOP/s and as a share of the machine's measured FMA peak
// (bench/fma_peak.h) at the active CPU level.
// Square products C = A . B of
//   (a) Eigen directly: a single-threaded Map<Matrix> product over the tensors' buffers,
//   (b) dtr::matmul with kernels::set_num_threads(1), and its ratio to (a),
//   (c) dtr::matmul with the default thread count (DTR_NUM_THREADS or the core count).
// Then kernels::cpu::gemm on every transpose and on the layer shapes of a GPT-2 124M
// step (B=4, T=64: 256 tokens) and a Llama-style MLP, with the default thread count;
// bench/torch_cpu_yardstick.py's gemm-shapes times torch.mm on the same rows.
// Last, kernels::cpu::gemm<bf16> against f32 on a few of those rows, next to the
// measured peak of AVX-512 BF16's dot product (vdpbf16ps) where the CPU has it.
// Each figure is the best of several timed runs after one warm-up run.
#include "bench/fma_peak.h"
#include "dtr/kernels/cpu/cpu_level.h"
#include "dtr/kernels/cpu/gemm.h"
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

std::vector<float> random_values(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) x = dist(rng);
  return v;
}

dtr::Tensor random_matrix(int64_t n, uint32_t seed) { return dtr::from_vector(random_values(n * n, seed), {n, n}); }

// One row of the shapes table: C[m, n] = op(A)[m, k] . op(B)[k, n]. "NT" is A as
// stored, B transposed (a linear layer's forward, x . W^T); "NN" its input gradient
// (dy . W); "TN" its weight gradient (dy^T . x).
struct Shape {
  const char* name;
  int64_t m, n, k;
  const char* op;
};

constexpr Shape kShapes[] = {
    {"square", 1024, 1024, 1024, "NN"},
    {"square", 1024, 1024, 1024, "NT"},
    {"square", 1024, 1024, 1024, "TN"},
    {"square", 1024, 1024, 1024, "TT"},
    {"gpt2 qkv forward", 256, 2304, 768, "NT"},
    {"gpt2 qkv input grad", 256, 768, 2304, "NN"},
    {"gpt2 qkv weight grad", 2304, 768, 256, "TN"},
    {"gpt2 mlp up forward", 256, 3072, 768, "NT"},
    {"gpt2 mlp down forward", 256, 768, 3072, "NT"},
    {"gpt2 mlp down weight grad", 768, 3072, 256, "TN"},
    {"gpt2 lm head forward", 256, 50257, 768, "NT"},
    {"gpt2 lm head input grad", 256, 768, 50257, "NN"},
    {"gpt2 lm head weight grad", 50257, 768, 256, "TN"},
    {"llama mlp up forward", 512, 5632, 2048, "NT"},
    {"llama mlp down input grad", 512, 5632, 2048, "NN"},
};

// One row's product on operands of element type T (the same random values for any
// T), ready to be timed.
template <class T>
struct ShapeProduct {
  using Transpose = dtr::kernels::cpu::Transpose;

  explicit ShapeProduct(const Shape& s)
      : shape(s),
        ta(s.op[0] == 'T' ? Transpose::yes : Transpose::no),
        tb(s.op[1] == 'T' ? Transpose::yes : Transpose::no),
        a(widened(random_values(s.m * s.k, 1))),
        b(widened(random_values(s.k * s.n, 2))),
        c(static_cast<size_t>(s.m * s.n)) {}

  void run() {
    const int64_t lda = ta == Transpose::no ? shape.k : shape.m, ldb = tb == Transpose::no ? shape.n : shape.k;
    dtr::kernels::cpu::gemm<T>(ta, tb, shape.m, shape.n, shape.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
                               c.data(), shape.n);
  }

  static std::vector<T> widened(const std::vector<float>& v) { return std::vector<T>(v.begin(), v.end()); }

  Shape shape;
  Transpose ta, tb;
  std::vector<T> a, b, c;
};

double gflops_of(const Shape& s, double seconds) {
  return 2.0 * static_cast<double>(s.m * s.n) * static_cast<double>(s.k) / seconds * 1e-9;
}

void print_shapes(double peak) {
  fmt::print("\nkernels::cpu::gemm, {} threads\n", dtr::kernels::num_threads());
  fmt::print("{:>26} | {:>20} | {:>2} | {:>12} | {:>7}\n", "shape", "m x n x k", "op", "GFLOP/s", "of peak");
  fmt::print("{:->26}-+-{:->20}-+-{:->2}-+-{:->12}-+-{:->7}\n", "", "", "", "", "");
  for (const Shape& s : kShapes) {
    ShapeProduct<float> product(s);
    const double gflops = gflops_of(s, best_times({[&] { product.run(); }})[0]);
    fmt::print("{:>26} | {:>20} | {:>2} | {:>7.1f} GF/s | {:>6.1f}%\n", s.name,
               fmt::format("{} x {} x {}", s.m, s.n, s.k), s.op, gflops, 100.0 * gflops / peak);
  }
}

// bf16 operands and C (f32 sums, kernels::cpu::gemm<bf16>) against f32 on the same
// rows, next to the peak of AVX-512 BF16's dot product, the instruction a bf16 GEMM
// of its own would run on.
void print_bf16(double fma_peak) {
  const int threads = dtr::kernels::num_threads();
  const double dot_peak = dtr::bench::measured_bf16_dot_peak_gflops(threads);
  fmt::print("\nbf16 through kernels::cpu::gemm<bf16>, {} threads; f32 FMA peak {:.1f} GFLOP/s, ", threads,
             fma_peak);
  if (dot_peak > 0) {
    fmt::print("vdpbf16ps peak {:.1f} GFLOP/s ({:.2f}x the FMA peak)\n", dot_peak, dot_peak / fma_peak);
  } else {
    fmt::print("no AVX-512 BF16 on this CPU\n");
  }
  fmt::print("{:>26} | {:>20} | {:>2} | {:>12} | {:>12} | {:>9}\n", "shape", "m x n x k", "op", "bf16", "f32",
             "bf16/f32");
  fmt::print("{:->26}-+-{:->20}-+-{:->2}-+-{:->12}-+-{:->12}-+-{:->9}\n", "", "", "", "", "", "");
  for (const Shape& s : {kShapes[0], kShapes[1], kShapes[7], kShapes[9]}) {
    ShapeProduct<dtr::bf16> half(s);
    ShapeProduct<float> single(s);
    const std::vector<double> best = best_times({[&] { half.run(); }, [&] { single.run(); }});
    fmt::print("{:>26} | {:>20} | {:>2} | {:>7.1f} GF/s | {:>7.1f} GF/s | {:>8.2f}x\n", s.name,
               fmt::format("{} x {} x {}", s.m, s.n, s.k), s.op, gflops_of(s, best[0]), gflops_of(s, best[1]),
               best[1] / best[0]);
  }
}

}  // namespace

int main() {
  const int default_threads = dtr::kernels::num_threads();
  const double peak_one = dtr::bench::measured_fma_peak_gflops(1);
  const double peak_all = dtr::bench::measured_fma_peak_gflops(default_threads);
  fmt::print("{}; measured FMA peak at {}: {:.1f} GFLOP/s on 1 thread, {:.1f} on {}\n",
             dtr::bench::cpu_model_name(), dtr::kernels::cpu::cpu_level_name(dtr::kernels::cpu::active_cpu_level()),
             peak_one, peak_all, default_threads);
  fmt::print("f32 C = A . B, square, row-major; best of >= 5 runs after a warm-up\n");
  fmt::print("(a): Eigen {}.{}.{} built into this file, SIMD: {}; (b), (c): dtr's CPU kernels {}; "
             "default threads: {}\n\n",
             EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION,
             Eigen::SimdInstructionSetsInUse(), dtr::kernels::cpu::cpu_level_description(),
             default_threads);
  fmt::print("{:>6} | {:>13} | {:>14} | {:>9} | {:>14} | {:>8} | {:>9} | {:>9}\n", "size", "(a) Eigen 1T",
             "(b) matmul 1T", "(b)/(a)", "(c) matmul " + std::to_string(default_threads) + "T",
             "(c)/(b)", "(b)/peak", "(c)/peak");
  fmt::print("{:->6}-+-{:->13}-+-{:->14}-+-{:->9}-+-{:->14}-+-{:->8}-+-{:->9}-+-{:->9}\n", "", "", "", "", "", "",
             "", "");

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
    fmt::print("{:>6} | {:>8.1f} GF/s | {:>9.1f} GF/s | {:>8.1f}% | {:>9.1f} GF/s | {:>7.2f}x | {:>8.1f}% | "
               "{:>8.1f}%{}\n",
               n, eigen, op1, 100.0 * op1 / eigen, opn, opn / op1, 100.0 * op1 / peak_one, 100.0 * opn / peak_all,
               max_diff > 1e-3f ? fmt::format("  (op differs from Eigen by {})", max_diff) : "");
  }
  print_shapes(peak_all);
  print_bf16(peak_all);
  return 0;
}
