// CUDA reductions (sum, mean, max, min, argmax) and softmax / log_softmax
// against the CPU ops on the same inputs: each dim of a 3-D tensor, several
// dims, keepdim, whole-tensor, non-contiguous views, every dtype, empty and
// one-element shapes, a 2^24-element row, many short rows, the kernels'
// size thresholds, leading dims (the column kernels, one pass and split),
// NaN rows and columns, -inf masks, huge values and run-to-run determinism.
// Inputs are fresh random values each run (the seed is printed on failure).
// Integer results and max/min/argmax must match bit for bit; float sums within
// the error bound of two different summation orders:
// |gpu - cpu| <= acc_rtol * sum|x| + out_rtol * |cpu| (acc_rtol from the
// accumulation type, out_rtol one rounding of the output type).
#include "tests/support/gpu_test_support.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/reduce.h"
#include "dtr/tensor/ops/softmax.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace dtr;
using namespace dtr::testing::gpu;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Random values of any `dtype` on the CPU: floats uniform in [lo, hi) (random_cpu),
// integers over a wide range (i64 small enough that 2^24 of them cannot overflow a sum).
Tensor random_cpu_any_dtype(const Shape& shape, DType dtype, std::mt19937& gen, double lo, double hi) {
  if (is_floating(dtype)) return random_cpu(shape, dtype, gen, lo, hi);
  const int64_t n = numel_of(shape);
  if (dtype == DType::u8) {
    std::uniform_int_distribution<int> dist(0, 255);
    std::vector<uint8_t> v(n);
    for (uint8_t& x : v) x = static_cast<uint8_t>(dist(gen));
    return from_vector(v, shape);
  }
  std::uniform_int_distribution<int64_t> dist(-1000000000, 1000000000);
  std::vector<int64_t> v(n);
  for (int64_t& x : v) x = dist(gen);
  return from_vector(v, shape).to(dtype);
}

// Counts elements with |got - want| > acc_rtol * scale + out_rtol * |want| + atol
// (infinities must match exactly and NaN must meet NaN); describes the first one.
struct Mismatches {
  int64_t count = 0;
  std::string first;
};

Mismatches compare(const Tensor& got, const Tensor& want, const std::vector<double>& scale,
                   double acc_rtol, double out_rtol, double atol = 0) {
  const std::vector<double> g = values_of(got), w = values_of(want);
  Mismatches m;
  for (size_t i = 0; i < w.size(); ++i) {
    bool ok;
    if (std::isnan(w[i]) || std::isnan(g[i])) {
      ok = std::isnan(w[i]) && std::isnan(g[i]);
    } else if (std::isinf(w[i]) || std::isinf(g[i])) {
      ok = g[i] == w[i];
    } else {
      const double s = scale.empty() ? 0.0 : scale[i];
      ok = std::fabs(g[i] - w[i]) <= acc_rtol * s + out_rtol * std::fabs(w[i]) + atol;
    }
    if (!ok && m.count++ == 0) {
      std::ostringstream os;
      os.precision(17);
      os << "index " << i << ": gpu " << g[i] << ", cpu " << w[i];
      m.first = os.str();
    }
  }
  return m;
}

#define CHECK_CLOSE(got, want, ...)                                   \
  do {                                                                \
    const Mismatches mm_ = compare((got), (want), __VA_ARGS__);       \
    INFO(mm_.count << " mismatches; first at " << mm_.first);         \
    CHECK(mm_.count == 0);                                            \
  } while (0)

enum class Op { sum, mean, max, min, argmax };
const char* op_name(Op op) {
  static const char* names[] = {"sum", "mean", "max", "min", "argmax"};
  return names[static_cast<int>(op)];
}

// max / min / argmax take one dim (dims.size() == 1) or none (the whole tensor).
Tensor apply(Op op, const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  switch (op) {
    case Op::sum: return sum(t, dims, keepdim);
    case Op::mean: return mean(t, dims, keepdim);
    case Op::max: return dims.empty() ? max(t) : max(t, dims[0], keepdim);
    case Op::min: return dims.empty() ? min(t) : min(t, dims[0], keepdim);
    case Op::argmax: return dims.empty() ? argmax(t) : argmax(t, dims[0], keepdim);
  }
  return {};
}

// The op on the GPU copy `gpu` of `cpu` (any view of it) against the CPU op.
void check_op(Op op, const Tensor& cpu, const Tensor& gpu, const std::vector<int64_t>& dims,
              bool keepdim) {
  CAPTURE(op_name(op), dims, keepdim, cpu.sizes(), name_of(cpu.dtype()));
  const Tensor want = apply(op, cpu, dims, keepdim);
  const Tensor got = apply(op, gpu, dims, keepdim);
  REQUIRE(got.device() == kGpu);
  CHECK(got.sizes() == want.sizes());
  CHECK(got.dtype() == want.dtype());
  if (op == Op::max || op == Op::min || op == Op::argmax || !is_floating(cpu.dtype())) {
    CHECK(same_bits(got, want));
    return;
  }
  const Tensor magnitude = abs(cpu.to(DType::f64));
  const Tensor scale = op == Op::sum ? sum(magnitude, dims, keepdim) : mean(magnitude, dims, keepdim);
  CHECK_CLOSE(got, want, scale.to_vector<double>(), acc_rtol(cpu.dtype()), out_rtol(cpu.dtype()));
}

void check_all_ops(const Tensor& cpu, const Tensor& gpu, const std::vector<int64_t>& dims,
                   bool keepdim) {
  for (Op op : {Op::sum, Op::mean, Op::max, Op::min, Op::argmax}) {
    if (op == Op::mean && !is_floating(cpu.dtype())) continue;
    if (dims.size() > 1 && op != Op::sum && op != Op::mean) continue;
    check_op(op, cpu, gpu, dims, keepdim);
  }
}

}  // namespace

TEST_CASE("CUDA reductions along each dim, several dims, keepdim and whole-tensor match the CPU",
          "[gpu][reduce]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  // dim 0: 37-element rows (warp per row); dims {1, 2}: 6450 (block per row);
  // everything: 238650 elements in one row (two passes).
  for (DType dtype : kAllDtypes) {
    const Tensor cpu = random_cpu_any_dtype({37, 50, 129}, dtype, gen, -2, 2);
    const Tensor gpu = cpu.to(kGpu);
    for (const std::vector<int64_t>& dims :
         std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {-1}, {0, 2}, {1, 2}, {0, 1}, {}}) {
      for (bool keepdim : {false, true}) check_all_ops(cpu, gpu, dims, keepdim);
    }
  }
}

TEST_CASE("CUDA reductions of non-contiguous views match the CPU", "[gpu][reduce]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  for (DType dtype : {DType::f32, DType::bf16, DType::i64, DType::u8}) {
    const Tensor base = random_cpu_any_dtype({40, 60, 70}, dtype, gen, -2, 2);
    const Tensor base_gpu = base.to(kGpu);
    auto views = [](const Tensor& b) {
      return std::vector<Tensor>{b.transpose(0, 2), b.slice(1, 1, 60, 3).narrow(0, 2, 30),
                                 b.permute({2, 0, 1}).slice(0, 0, 70, 2),
                                 b.select(1, 3).unsqueeze(1).expand({40, 5, 70})};
    };
    const std::vector<Tensor> cpu_views = views(base), gpu_views = views(base_gpu);
    for (size_t v = 0; v < cpu_views.size(); ++v) {
      CAPTURE(v);
      CHECK_FALSE(gpu_views[v].is_contiguous());
      for (int64_t d = 0; d < 3; ++d) check_all_ops(cpu_views[v], gpu_views[v], {d}, false);
      check_all_ops(cpu_views[v], gpu_views[v], {0, 2}, true);
      check_all_ops(cpu_views[v], gpu_views[v], {}, false);
    }
  }
}

TEST_CASE("CUDA reductions of a 2^24-element row use the whole tensor", "[gpu][reduce]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  for (DType dtype : {DType::f32, DType::bf16, DType::u8, DType::i64}) {
    const Tensor cpu = random_cpu_any_dtype({int64_t{1} << 24}, dtype, gen, -2, 2);
    const Tensor gpu = cpu.to(kGpu);
    check_all_ops(cpu, gpu, {}, false);
    check_all_ops(cpu, gpu, {0}, true);
  }
  // u8 sums past the i32 range are exact in i64.
  const Tensor big = full({int64_t{1} << 24}, 255, {.dtype = DType::u8, .device = kGpu});
  CHECK(sum(big).item<int64_t>() == 255 * (int64_t{1} << 24));
}

TEST_CASE("CUDA reductions of many short rows and of rows at the kernels' size thresholds",
          "[gpu][reduce]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  // Many short rows: one warp per row (and dim 0 of a wide tensor: rows of 3).
  for (DType dtype : {DType::f32, DType::u8}) {
    const Tensor cpu = random_cpu_any_dtype({int64_t{1} << 20, 3}, dtype, gen, -2, 2);
    const Tensor gpu = cpu.to(kGpu);
    check_all_ops(cpu, gpu, {1}, false);
    const Tensor wide = random_cpu_any_dtype({3, int64_t{1} << 18}, dtype, gen, -2, 2);
    check_all_ops(wide, wide.to(kGpu), {0}, false);
  }
  // Rows around the warp / block / split limits, with odd lengths whose rows
  // start unaligned; each dtype's vector width.
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::u8}) {
    for (int64_t cols : {1, 31, 1024, 1025, 65536, 65537, 200003}) {
      for (int64_t rows : {1, 3}) {
        const Tensor cpu = random_cpu_any_dtype({rows, cols}, dtype, gen, -2, 2);
        check_all_ops(cpu, cpu.to(kGpu), {1}, false);
      }
    }
  }
}

TEST_CASE("CUDA reductions of empty, one-element and 0-d tensors", "[gpu][reduce]") {
  const Tensor e = empty({4, 0, 3}, {.device = kGpu});
  CHECK(sum(e, {1}).to(kCpu).to_vector<float>() == std::vector<float>(12, 0.0f));
  CHECK(sum(e).item() == 0.0);
  const std::vector<double> m = values_of(mean(e, {1}));
  CHECK(m.size() == 12);
  for (double v : m) CHECK(std::isnan(v));
  CHECK(sum(e, {2}).sizes() == Shape{4, 0});
  CHECK(max(e, 2).sizes() == Shape{4, 0});
  CHECK(sum(empty({0, 5}, {.dtype = DType::i64, .device = kGpu}), {1}).sizes() == Shape{0});
  CHECK_THROWS_WITH(argmax(e), Catch::Contains("argmax: cannot reduce over dim 1 of size 0"));

  const Tensor one = from_vector<float>({-1.5f}, {1}).to(kGpu);
  CHECK(sum(one).item() == -1.5);
  CHECK(mean(one).item() == -1.5);
  CHECK(max(one, 0).item() == -1.5);
  CHECK(argmax(one).item<int64_t>() == 0);
  const Tensor scalar = scalar_tensor(7, DType::i32, kGpu);
  CHECK(sum(scalar).item<int64_t>() == 7);
  CHECK(min(scalar).item() == 7.0);
  CHECK(argmax(scalar).item<int64_t>() == 0);
}

TEST_CASE("CUDA max, min and argmax propagate NaN: the first NaN wins", "[gpu][reduce]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    for (int64_t cols : {20, 3000, 300000}) {  // warp, block, two-pass
      CAPTURE(name_of(dtype), cols);
      std::vector<double> x = values_of(random_cpu({4, cols}, DType::f64, gen, -2, 2));
      // Row 0: two NaNs (the first is the argmax); row 1: NaN last; row 3: NaN first; row 2 none.
      const int64_t a = cols / 3, b = 2 * cols / 3;
      x[a] = kNaN;
      x[b] = kNaN;
      x[cols + cols - 1] = kNaN;
      x[3 * cols] = kNaN;
      const Tensor cpu = from_vector(x, {4, cols}).to(dtype);
      const Tensor gpu = cpu.to(kGpu);
      const int64_t clean_row = argmax(cpu, 1).to_vector<int64_t>()[2];
      CHECK(argmax(gpu, 1).to(kCpu).to_vector<int64_t>() ==
            std::vector<int64_t>{a, cols - 1, clean_row, 0});
      CHECK(same_bits(argmax(gpu, 1), argmax(cpu, 1)));
      for (const Tensor& r : {max(gpu, 1), min(gpu, 1)}) {
        const std::vector<double> v = values_of(r);
        CHECK(std::isnan(v[0]));
        CHECK(std::isnan(v[1]));
        CHECK_FALSE(std::isnan(v[2]));
        CHECK(std::isnan(v[3]));
      }
      CHECK(values_of(max(gpu, 1))[2] == values_of(max(cpu, 1))[2]);
      CHECK(std::isnan(max(gpu).item()));
      CHECK(argmax(gpu).item<int64_t>() == a);
    }
  }
}

TEST_CASE("CUDA reductions give bitwise the same result on every run", "[gpu][reduce]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  const Tensor row = random_cpu({int64_t{1} << 24}, DType::f32, gen, -2, 2).to(kGpu);
  const Tensor mat = random_cpu({2048, 4099}, DType::bf16, gen, -2, 2).to(kGpu);
  for (int run = 0; run < 3; ++run) {
    CHECK(same_bits(sum(row), sum(row)));
    CHECK(same_bits(mean(row), mean(row)));
    CHECK(same_bits(sum(mat, {1}), sum(mat, {1})));
    CHECK(same_bits(sum(mat, {0}), sum(mat, {0})));
    CHECK(same_bits(argmax(row), argmax(row)));
  }
  // The same values at an unaligned address reduce in the same order.
  const Tensor shifted = random_cpu({(int64_t{1} << 20) + 1}, DType::f32, gen, -2, 2).to(kGpu);
  const Tensor tail = shifted.narrow(0, 1, int64_t{1} << 20);
  CHECK(same_bits(sum(tail), sum(tail.clone())));
}

// ---------------------------------------------------------------------------
// Reductions over the leading dims of a contiguous tensor: the column kernels
// (dtr/kernels/cuda/reduce.h), which read [outer, inner] in place. Which path ran
// is not observable from here; the shapes below are ones the op sends there.

namespace {

// All ops that take `dims` (max / min / argmax only a single dim) on a GPU copy
// of `cpu`, with keepdim false (and true unless `both_keepdims` is false).
void check_leading(const Tensor& cpu, const std::vector<int64_t>& dims, bool both_keepdims = true) {
  const Tensor gpu = cpu.to(kGpu);
  REQUIRE(gpu.is_contiguous());
  check_all_ops(cpu, gpu, dims, false);
  if (both_keepdims) check_all_ops(cpu, gpu, dims, true);
}

}  // namespace

TEST_CASE("CUDA reductions over leading dims (column kernels) match the CPU", "[gpu][reduce]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  struct Case {
    Shape shape;
    std::vector<std::vector<int64_t>> dims;
  };
  // Tiny, odd and tile-straddling column counts; size-1 dims anywhere do not
  // matter ([7, 1, 33] over {0}, [1, 6, 1, 50] over {1}, [6, 50, 1] over {0, 2}).
  // [1, 1] keeps a single element, which the op leaves to the row kernels.
  const std::vector<Case> cases = {
      {{1, 1}, {{0}}},
      {{3, 5}, {{0}, {-2}}},
      {{7, 1, 33}, {{0}, {0, 1}}},
      {{1, 6, 1, 50}, {{1}, {0, 1}, {1, 2}}},
      {{6, 50, 1}, {{0, 2}}},
      {{1000, 3}, {{0}}},  // split into pieces, 3 columns
      {{64, 1025}, {{0}}},  // odd column count: one column per thread, a partial tile
      {{64, 1026}, {{0}}},  // even: paired 1- and 2-byte columns, a partial tile
      {{4, 256, 768}, {{0, 1}, {0}}},  // a bias gradient (split: 1024 rows)
  };
  for (DType dtype : kAllDtypes) {
    for (const Case& c : cases) {
      const Tensor cpu = random_cpu_any_dtype(c.shape, dtype, gen, -2, 2);
      for (const std::vector<int64_t>& dims : c.dims) check_leading(cpu, dims);
    }
  }
}

TEST_CASE("CUDA reductions over leading dims split into pieces match the CPU", "[gpu][reduce]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  // Row counts that split outer into pieces (the last one short), for
  // each element width: [8192, 768] is a GPT-2 bias gradient (43 pieces),
  // [2048, 3072] its MLP one at a smaller batch (11), [300, 5] just two pieces.
  for (DType dtype : kAllDtypes) {
    CAPTURE(name_of(dtype));
    check_leading(random_cpu_any_dtype({2, 4096, 768}, dtype, gen, -2, 2), {0, 1}, false);
    check_leading(random_cpu_any_dtype({8192, 768}, dtype, gen, -2, 2), {0}, false);
    check_leading(random_cpu_any_dtype({2048, 3072}, dtype, gen, -2, 2), {0}, false);
    check_leading(random_cpu_any_dtype({300, 5}, dtype, gen, -2, 2), {0});
    check_leading(random_cpu_any_dtype({4099, 33}, dtype, gen, -2, 2), {0});  // 29 pieces, the last of 67 rows
  }
  const Tensor bias_grad = random_cpu({8, 1024, 3072}, DType::bf16, gen, -2, 2);
  check_op(Op::sum, bias_grad, bias_grad.to(kGpu), {0, 1}, false);
}

TEST_CASE("CUDA column reductions: misaligned starts, empty columns, NaN and the bias gradient",
          "[gpu][reduce]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  // A contiguous view starting one element past an aligned address: 1- and
  // 2-byte columns cannot be read in pairs there, and the result is the same.
  for (DType dtype : {DType::bf16, DType::f16, DType::u8, DType::f32}) {
    CAPTURE(name_of(dtype));
    const Tensor flat = random_cpu_any_dtype({1 + 2048 * 96}, dtype, gen, -2, 2);
    const Tensor cpu = flat.narrow(0, 1, 2048 * 96).reshape({2048, 96});
    const Tensor gpu = flat.to(kGpu).narrow(0, 1, 2048 * 96).reshape({2048, 96});
    REQUIRE(gpu.is_contiguous());
    check_all_ops(cpu, gpu, {0}, false);
    const Tensor aligned = gpu.clone();
    for (Op op : {Op::sum, Op::max, Op::argmax}) {
      CAPTURE(op_name(op));
      CHECK(same_bits(apply(op, gpu, {0}, false), apply(op, aligned, {0}, false)));
    }
  }

  // No rows: sums of 0, means of NaN (the CPU's rules).
  const Tensor none = empty({0, 5}, {.device = kGpu});
  CHECK(sum(none, {0}).to(kCpu).to_vector<float>() == std::vector<float>(5, 0.0f));
  CHECK(sum(none, {0}, true).sizes() == Shape{1, 5});
  for (double v : values_of(mean(none, {0}))) CHECK(std::isnan(v));
  CHECK_THROWS_WITH(argmax(none, 0), Catch::Contains("argmax: cannot reduce over dim 0 of size 0"));

  // NaN in columns: the first NaN wins max / min / argmax, one pass and split.
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    for (int64_t rows : {100, 3000}) {
      CAPTURE(name_of(dtype), rows);
      const int64_t cols = 4;
      std::vector<double> x = values_of(random_cpu({rows, cols}, DType::f64, gen, -2, 2));
      // Column 0: two NaNs (the first is the argmax); column 1: NaN last; column 3: NaN first.
      const int64_t a = rows / 3, b = 2 * rows / 3;
      x[a * cols] = kNaN;
      x[b * cols] = kNaN;
      x[(rows - 1) * cols + 1] = kNaN;
      x[3] = kNaN;
      const Tensor cpu = from_vector(x, {rows, cols}).to(dtype);
      const Tensor gpu = cpu.to(kGpu);
      const std::vector<int64_t> got = argmax(gpu, 0).to(kCpu).to_vector<int64_t>();
      CHECK(got[0] == a);
      CHECK(got[1] == rows - 1);
      CHECK(got[3] == 0);
      CHECK(same_bits(argmax(gpu, 0), argmax(cpu, 0)));
      for (const Tensor& r : {max(gpu, 0), min(gpu, 0)}) {
        const std::vector<double> v = values_of(r);
        CHECK(std::isnan(v[0]));
        CHECK(std::isnan(v[1]));
        CHECK_FALSE(std::isnan(v[2]));
        CHECK(std::isnan(v[3]));
      }
      CHECK(same_bits(max(gpu, 0).narrow(0, 2, 1), max(cpu, 0).narrow(0, 2, 1)));
    }
  }

  // A Linear's bias gradient goes through sum over the leading dims (autograd::sum_to).
  const Tensor x = random_cpu({4, 64, 48}, DType::f32, gen, -2, 2);
  const Tensor g = random_cpu({4, 64, 48}, DType::f32, gen, -2, 2);
  const Tensor b = random_cpu({48}, DType::f32, gen, -2, 2);
  auto bias_grad = [&](Device device) {
    const Tensor leaf = b.to(device).detach().requires_grad_();
    sum(mul(add(x.to(device), leaf), g.to(device))).backward();
    return leaf.grad();
  };
  const Tensor want = bias_grad(kCpu), got = bias_grad(kGpu);
  REQUIRE(got.device() == kGpu);
  CHECK_CLOSE(got, want, values_of(sum(abs(g.to(DType::f64)), {0, 1})), acc_rtol(DType::f32), 0.0);
}

TEST_CASE("CUDA column reductions give bitwise the same result on every run", "[gpu][reduce]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  for (DType dtype : {DType::bf16, DType::f32}) {
    // Split ([8192, 768]) and one pass ([64, 3000]).
    for (const Shape& shape : {Shape{8192, 768}, Shape{64, 3000}}) {
      CAPTURE(name_of(dtype), shape);
      const Tensor gpu = random_cpu(shape, dtype, gen, -2, 2).to(kGpu);
      const Tensor first_sum = sum(gpu, {0}), first_mean = mean(gpu, {0});
      const Tensor first_max = max(gpu, 0), first_argmax = argmax(gpu, 0);
      for (int run = 0; run < 3; ++run) {
        CHECK(same_bits(sum(gpu, {0}), first_sum));
        CHECK(same_bits(mean(gpu, {0}), first_mean));
        CHECK(same_bits(max(gpu, 0), first_max));
        CHECK(same_bits(argmax(gpu, 0), first_argmax));
      }
    }
    // [8, 1024, 768] over {0, 1} is the same [8192, 768] columns.
    const Tensor gpu = random_cpu({8192, 768}, dtype, gen, -2, 2).to(kGpu);
    CHECK(same_bits(sum(gpu.view({8, 1024, 768}), {0, 1}), sum(gpu, {0})));
  }
}

TEST_CASE("CUDA reductions over non-leading dims and of non-contiguous inputs keep the row path",
          "[gpu][reduce]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  for (DType dtype : {DType::f32, DType::bf16, DType::i64}) {
    CAPTURE(name_of(dtype));
    const Tensor cpu = random_cpu_any_dtype({4, 256, 96}, dtype, gen, -2, 2);
    const Tensor gpu = cpu.to(kGpu);
    // A kept dim before a reduced one: permuted to rows first.
    for (const std::vector<int64_t>& dims :
         std::vector<std::vector<int64_t>>{{1}, {2}, {0, 2}, {1, 2}}) {
      check_all_ops(cpu, gpu, dims, false);
    }
    // Leading reduced dims of non-contiguous views: a transpose and a column slice.
    const Tensor cpu_t = cpu.transpose(0, 2), gpu_t = gpu.transpose(0, 2);
    const Tensor cpu_s = cpu.narrow(2, 5, 40), gpu_s = gpu.narrow(2, 5, 40);
    REQUIRE_FALSE(gpu_t.is_contiguous());
    REQUIRE_FALSE(gpu_s.is_contiguous());
    for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{0}, {0, 1}}) {
      check_all_ops(cpu_t, gpu_t, dims, true);
      check_all_ops(cpu_s, gpu_s, dims, false);
    }
    // Whole-tensor reductions and a single kept element stay on the row kernels.
    check_all_ops(cpu, gpu, {}, false);
    check_all_ops(cpu.narrow(2, 0, 1).contiguous(), gpu.narrow(2, 0, 1).contiguous(), {0, 1},
                  false);
  }
}

// ---------------------------------------------------------------------------
// softmax / log_softmax

namespace {

enum class Kind { softmax, log_softmax };

Tensor run(Kind kind, const Tensor& t, int64_t dim) {
  return kind == Kind::softmax ? softmax(t, dim) : log_softmax(t, dim);
}

// Softmax outputs are checked relative to themselves (plus a subnormal-sized
// margin at the flush threshold); log_softmax also absolutely, for outputs near 0.
void check_softmax(Kind kind, const Tensor& cpu, const Tensor& gpu, int64_t dim) {
  const DType dtype = cpu.dtype();
  CAPTURE(kind == Kind::softmax ? "softmax" : "log_softmax", name_of(dtype), cpu.sizes(), dim);
  const Tensor want = run(kind, cpu, dim);
  const Tensor got = run(kind, gpu, dim);
  REQUIRE(got.device() == kGpu);
  CHECK(got.sizes() == want.sizes());
  CHECK(got.dtype() == dtype);
  const double rtol = dtype == DType::f64 ? 1e-12 : dtype == DType::f32 ? 2e-5 : out_rtol(dtype) * 1.01;
  const double atol = kind == Kind::log_softmax ? (dtype == DType::f64 ? 1e-12 : 5e-5)
                                                : (dtype == DType::f16 ? 6e-8 : 1e-37);
  CHECK_CLOSE(got, want, {}, 0.0, rtol, atol);
}

}  // namespace

TEST_CASE("CUDA softmax and log_softmax along each dim of a 3-D tensor match the CPU",
          "[gpu][softmax]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    const Tensor cpu = random_cpu({9, 40, 300}, dtype, gen, -8, 8);
    const Tensor gpu = cpu.to(kGpu);
    for (int64_t dim : {0, 1, 2, -1}) {
      for (Kind kind : {Kind::softmax, Kind::log_softmax}) check_softmax(kind, cpu, gpu, dim);
    }
    // A non-contiguous view.
    for (Kind kind : {Kind::softmax, Kind::log_softmax}) {
      check_softmax(kind, cpu.transpose(0, 2), gpu.transpose(0, 2), 1);
    }
  }
}

TEST_CASE("CUDA softmax of short rows, several to a warp, matches the CPU", "[gpu][softmax]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  // Rows of 1 to 16 vectors go 8, 4 or 2 to a warp; row counts that leave a warp, and a
  // block, partly empty; lengths around each vector boundary of f32 (4) and bf16 (8).
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (int64_t cols : {1, 3, 8, 9, 17, 31, 33, 64, 65, 127, 128, 129}) {
      for (int64_t rows : {1, 7, 37, 1000}) {
        const Tensor cpu = random_cpu({rows, cols}, dtype, gen, -8, 8);
        const Tensor gpu = cpu.to(kGpu);
        for (Kind kind : {Kind::softmax, Kind::log_softmax}) check_softmax(kind, cpu, gpu, 1);
      }
    }
  }
}

TEST_CASE("CUDA softmax of huge values and -inf masks: masked entries are exactly 0",
          "[gpu][softmax]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  std::bernoulli_distribution masked(0.3);
  // Row lengths for each kernel: rows sharing a warp, warp (registers), block
  // (registers, 1 to 8 vectors per thread), block with the row in shared memory
  // (16-bit), block reading the row twice. Between them the dtypes reach every width.
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    for (int64_t cols : {5, 31, 100, 200, 1000, 1500, 3000, 20000, 50304, 70000}) {
      CAPTURE(name_of(dtype), cols);
      const int64_t rows = 6;
      std::vector<double> x = values_of(random_cpu({rows, cols}, DType::f64, gen, -8, 8));
      for (int64_t j = 0; j < cols; ++j) {
        x[j] *= 1000;                                  // row 0: huge values (+-8000)
        if (masked(gen)) x[cols + j] = -kInf;          // row 1: random mask
        if (j != cols / 2) x[2 * cols + j] = -kInf;    // row 2: one unmasked entry
        x[3 * cols + j] = -kInf;                       // row 3: all masked -> NaN
      }
      x[4 * cols + cols / 3] = kNaN;                   // row 4: NaN; row 5: plain
      x[cols] = 1e4;                                   // row 1 also has a huge value
      const Tensor cpu = from_vector(x, {rows, cols}).to(dtype);
      const Tensor gpu = cpu.to(kGpu);
      for (Kind kind : {Kind::softmax, Kind::log_softmax}) check_softmax(kind, cpu, gpu, 1);

      const std::vector<double> p = values_of(softmax(gpu, 1)), lp = values_of(log_softmax(gpu, 1));
      int64_t wrong_masked = 0, wrong_nan = 0;
      for (int64_t j = 0; j < cols; ++j) {
        if (x[cols + j] == -kInf && (p[cols + j] != 0.0 || lp[cols + j] != -kInf)) ++wrong_masked;
        if (j != cols / 2 && p[2 * cols + j] != 0.0) ++wrong_masked;
        if (!std::isnan(p[3 * cols + j]) || !std::isnan(p[4 * cols + j])) ++wrong_nan;
      }
      CHECK(wrong_masked == 0);
      CHECK(wrong_nan == 0);
      CHECK(p[2 * cols + cols / 2] == 1.0);
      CHECK(lp[2 * cols + cols / 2] == 0.0);
    }
  }
}

TEST_CASE("CUDA softmax gives bitwise the same result on every run", "[gpu][softmax]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  for (int64_t cols : {777, 50304, 70000}) {
    const Tensor gpu = random_cpu({64, cols}, DType::bf16, gen, -8, 8).to(kGpu);
    const Tensor first = softmax(gpu), first_log = log_softmax(gpu);
    for (int run = 0; run < 2; ++run) {
      CHECK(same_bits(softmax(gpu), first));
      CHECK(same_bits(log_softmax(gpu), first_log));
    }
  }
}
