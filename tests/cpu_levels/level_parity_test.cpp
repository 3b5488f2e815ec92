// Every CPU kernel family at the level under test (main.cpp) against the same call
// at the baseline level, on the same inputs, in one process (set_cpu_level).
//
// Bitwise where the arithmetic per element is the same at every level: the kernels
// are compiled without FMA contraction, and elementwise math calls the same libm
// functions (or, for tanh-GELU's exp, the same arithmetic: exp_arith), so copies, elementwise ops, comparisons, max/min/argmax, embeddings,
// the fused optimizers and block quantization must match exactly. Within a stated tolerance where the
// order of a sum or Eigen's vectorised exp depends on the vector width: GEMM,
// sums, norms, softmax, cross-entropy and attention.
//
// Run natively for each level the CPU has, and under CPU emulation (qemu) at the
// level the emulated CPU has, where any instruction above it would stop the run.
#include "tests/cpu_levels/level_under_test.h"

#include "dtr/kernels/cpu/adamw.h"
#include "dtr/kernels/cpu/attention.h"
#include "dtr/kernels/cpu/block_quantize.h"
#include "dtr/kernels/cpu/copy.h"
#include "dtr/kernels/cpu/cross_entropy.h"
#include "dtr/kernels/cpu/elementwise.h"
#include "dtr/kernels/cpu/embedding.h"
#include "dtr/kernels/cpu/gemm.h"
#include "dtr/kernels/cpu/norm.h"
#include "dtr/kernels/cpu/reduce.h"
#include "dtr/kernels/cpu/sgd.h"
#include "dtr/kernels/cpu/softmax.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

using namespace dtr;
using namespace dtr::kernels::cpu;

namespace {

template <class T>
std::vector<T> random_values(size_t n, unsigned seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(dist(gen));
  return v;
}

// Calls run() (which returns the outputs) at baseline, then at the level under
// test, and returns both; the level under test stays active afterwards.
template <class Run>
auto at_baseline_and_level(Run run) {
  set_cpu_level(CpuLevel::baseline);
  auto expected = run();
  set_cpu_level(test::level_under_test());
  auto actual = run();
  return std::make_pair(expected, actual);
}

template <class T>
void require_bitwise(const std::vector<T>& expected, const std::vector<T>& actual,
                     const std::string& what) {
  INFO(what << " at " << cpu_level_name(test::level_under_test()));
  REQUIRE(expected.size() == actual.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    // A NaN's sign and payload carry nothing (libm's variants differ in them).
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(expected[i]) && std::isnan(actual[i])) continue;
    }
    if (std::memcmp(&expected[i], &actual[i], sizeof(T)) != 0) {
      INFO("element " << i << ": baseline " << double(expected[i]) << ", level "
                      << double(actual[i]));
      FAIL("not bitwise equal");
    }
  }
}

// Normwise: |actual - expected| <= tol * max |expected| for every element, NaN only
// where baseline has NaN.
template <class T>
void require_close(const std::vector<T>& expected, const std::vector<T>& actual, double tol,
                   const std::string& what) {
  INFO(what << " at " << cpu_level_name(test::level_under_test()));
  REQUIRE(expected.size() == actual.size());
  double max_abs = 0;
  for (T e : expected) {
    if (!std::isnan(static_cast<double>(e))) max_abs = std::max(max_abs, std::abs(double(e)));
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    const double e = static_cast<double>(expected[i]);
    const double a = static_cast<double>(actual[i]);
    if (std::isnan(e) || std::isnan(a)) {
      INFO("element " << i << ": baseline " << e << ", level " << a);
      REQUIRE(std::isnan(e) == std::isnan(a));
      continue;
    }
    if (std::abs(a - e) > tol * max_abs) {
      INFO("element " << i << ": baseline " << e << ", level " << a);
      FAIL("differs by more than " << tol << " x " << max_abs << " (the largest |baseline|)");
    }
  }
}

// The outputs of several kernels, compared one by one.
using Outputs = std::vector<std::pair<std::string, std::vector<float>>>;

void require_close(const Outputs& expected, const Outputs& actual, double tol) {
  REQUIRE(expected.size() == actual.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    require_close(expected[i].second, actual[i].second, tol, expected[i].first);
  }
}

constexpr Transpose kTransposes[] = {Transpose::no, Transpose::yes};

}  // namespace

TEST_CASE("gemm at the level under test matches baseline to the accumulation-order tolerance",
          "[cpu_levels]") {
  // Odd sizes exercise every edge of the vectorised blocks; f32 products of k values
  // in [-1, 1] differ only in summation order: a few ulps of k.
  const int64_t m = 37, n = 29, k = 41;
  for (Transpose ta : kTransposes) {
    for (Transpose tb : kTransposes) {
      const auto a = random_values<float>(m * k, 1), b = random_values<float>(k * n, 2);
      const auto c0 = random_values<float>(m * n, 3), bias = random_values<float>(n, 4);
      const int64_t lda = ta == Transpose::no ? k : m, ldb = tb == Transpose::no ? n : k;
      auto [expected, actual] = at_baseline_and_level([&] {
        std::vector<float> c = c0;
        gemm<float>(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 0.25f, c.data(), n);
        std::vector<float> d(m * n), pre(m * n);
        gemm<float>(ta, tb, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, d.data(), n,
                    {.bias = bias.data(),
                     .activation = kernels::GemmActivation::gelu_tanh,
                     .pre = pre.data()});
        return Outputs{{"f32 gemm", c}, {"f32 gemm + bias + gelu", d}, {"its pre-activation", pre}};
      });
      require_close(expected, actual, 1e-6);
    }
  }
  const auto a = random_values<double>(m * k, 5), b = random_values<double>(k * n, 6);
  auto [expected, actual] = at_baseline_and_level([&] {
    std::vector<double> c(2 * m * n);
    gemm_batched<double>(2, Transpose::no, Transpose::yes, m, n, k, 1.0, a.data(), k, 0, b.data(),
                         k, 0, 0.0, c.data(), n, m * n);
    return c;
  });
  require_close(expected, actual, 1e-14, "f64 batched gemm");
  // bf16 rounds each result once: one bf16 ulp (2^-8 relative) apart at most.
  const auto ah = random_values<bf16>(m * k, 7), bh = random_values<bf16>(k * n, 8);
  auto [expected_h, actual_h] = at_baseline_and_level([&] {
    std::vector<bf16> c(m * n);
    gemm<bf16>(Transpose::no, Transpose::no, m, n, k, 1.0f, ah.data(), k, bh.data(), n, 0.0f,
               c.data(), n);
    return c;
  });
  require_close(expected_h, actual_h, 1.0 / 128, "bf16 gemm");
}

TEST_CASE("elementwise kernels at the level under test are bitwise equal to baseline",
          "[cpu_levels]") {
  // A strided, broadcast layout: x is [4, 300] read with a transposed stride.
  const int64_t sizes[2] = {300, 4};
  const int64_t x_strides[2] = {1, 300}, out_strides[2] = {4, 1}, row_strides[2] = {0, 1};
  const auto x = random_values<float>(1200, 11, -4.0, 4.0);
  const auto y = random_values<float>(1200, 12, 0.5, 3.0);
  const auto row = random_values<float>(4, 13, -2.0, 2.0);
  for (int op = 0; op <= static_cast<int>(UnaryOp::silu); ++op) {
    const auto unary_op = static_cast<UnaryOp>(op);
    auto [expected, actual] = at_baseline_and_level([&] {
      std::vector<float> out(1200);
      unary<float>(unary_op, 2, sizes, x.data(), x_strides, out.data(), out_strides);
      if (has_grad_kernel(unary_op)) {
        std::vector<float> grad(1200);
        unary_grad<float>(unary_op, 2, sizes, y.data(), x_strides, x.data(), x_strides,
                          grad.data(), out_strides);
        out.insert(out.end(), grad.begin(), grad.end());
      }
      return out;
    });
    require_bitwise(expected, actual, "unary " + std::string(unary_op_name(unary_op)));
  }
  // Contiguous, where the loops vectorize, over exp's whole range and its edges.
  std::vector<float> wide = random_values<float>(4093, 15, -130.0, 110.0);
  const float inf = std::numeric_limits<float>::infinity();
  for (float special : {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 1e-30f, -60.0f}) {
    wide.push_back(special);
  }
  const int64_t wide_size[1] = {static_cast<int64_t>(wide.size())}, unit_stride[1] = {1};
  for (UnaryOp unary_op : {UnaryOp::gelu_tanh, UnaryOp::gelu_erf, UnaryOp::sigmoid, UnaryOp::silu}) {
    auto [expected, actual] = at_baseline_and_level([&] {
      std::vector<float> out(wide.size()), grad(wide.size());
      unary<float>(unary_op, 1, wide_size, wide.data(), unit_stride, out.data(), unit_stride);
      unary_grad<float>(unary_op, 1, wide_size, wide.data(), unit_stride, wide.data(), unit_stride, grad.data(),
                        unit_stride);
      out.insert(out.end(), grad.begin(), grad.end());
      return out;
    });
    require_bitwise(expected, actual, "contiguous unary " + std::string(unary_op_name(unary_op)));
  }
  for (int op = 0; op <= static_cast<int>(BinaryOp::minimum); ++op) {
    const auto binary_op = static_cast<BinaryOp>(op);
    auto [expected, actual] = at_baseline_and_level([&] {
      std::vector<float> out(1200);
      binary<float>(binary_op, 2, sizes, x.data(), x_strides, row.data(), row_strides,
                    out.data(), out_strides);
      std::vector<bf16> xh(x.begin(), x.end()), outh(1200);
      for (size_t i = 0; i < x.size(); ++i) xh[i] = bf16(x[i]);
      const std::vector<bf16> rowh = {bf16(row[0]), bf16(row[1]), bf16(row[2]), bf16(row[3])};
      binary<bf16>(binary_op, 2, sizes, xh.data(), x_strides, rowh.data(), row_strides,
                   outh.data(), out_strides);
      for (bf16 v : outh) out.push_back(static_cast<float>(v));
      return out;
    });
    require_bitwise(expected, actual, "binary " + std::string(binary_op_name(binary_op)));
  }
  const auto xi = random_values<int32_t>(1200, 14, -1000, 1000);
  const std::vector<int32_t> rowi = {3, -7, 11, 1};
  auto [expected, actual] = at_baseline_and_level([&] {
    std::vector<int32_t> out(1200), scaled(1200);
    binary<int32_t>(BinaryOp::mul, 2, sizes, xi.data(), x_strides, rowi.data(), row_strides,
                    out.data(), out_strides);
    add_scaled<int32_t>(2, sizes, xi.data(), x_strides, rowi.data(), row_strides, 5,
                        scaled.data(), out_strides);
    std::vector<uint8_t> mask(1200);
    compare<int32_t>(CompareOp::lt, 2, sizes, xi.data(), x_strides, rowi.data(), row_strides,
                     mask.data(), out_strides);
    std::vector<int32_t> chosen(1200);
    where<int32_t>(2, sizes, mask.data(), out_strides, out.data(), out_strides, scaled.data(),
                   out_strides, chosen.data(), out_strides);
    out.insert(out.end(), chosen.begin(), chosen.end());
    out.push_back(any_element<int32_t>(ElementTest::negative, 2, sizes, xi.data(), x_strides));
    return out;
  });
  require_bitwise(expected, actual, "int32 binary, add_scaled, compare, where, any_element");
  auto [expected_f, actual_f] = at_baseline_and_level([&] {
    std::vector<float> out(1200);
    add_scaled<float>(2, sizes, x.data(), x_strides, y.data(), x_strides, -0.3f, out.data(),
                      out_strides);
    return out;
  });
  require_bitwise(expected_f, actual_f, "f32 add_scaled");
}

TEST_CASE("copies, fills and conversions at the level under test are bitwise equal to baseline",
          "[cpu_levels]") {
  const int64_t sizes[2] = {50, 40};
  const int64_t strided[2] = {1, 50}, contiguous[2] = {40, 1};
  const auto x = random_values<float>(2000, 21, -300.0, 300.0);
  auto [expected, actual] = at_baseline_and_level([&] {
    std::vector<bf16> h(2000);
    copy<float, bf16>(2, sizes, x.data(), strided, h.data(), contiguous);
    std::vector<f16> g(2000);
    copy<float, f16>(2, sizes, x.data(), strided, g.data(), contiguous);
    std::vector<int32_t> i(2000);
    copy<float, int32_t>(2, sizes, x.data(), contiguous, i.data(), contiguous);
    std::vector<double> out(2000);
    copy<bf16, double>(2, sizes, h.data(), contiguous, out.data(), strided);
    for (size_t j = 0; j < 2000; ++j) out.push_back(static_cast<double>(g[j]) + i[j]);
    std::vector<float> filled(2000);
    fill<float>(2, sizes, filled.data(), strided, 1.25f);
    std::vector<float> range(777);
    arange<float>(range.data(), 777, -3.0, 0.1);
    out.insert(out.end(), filled.begin(), filled.end());
    out.insert(out.end(), range.begin(), range.end());
    return out;
  });
  require_bitwise(expected, actual, "copy, fill, arange");
}

TEST_CASE("reductions at the level under test match baseline", "[cpu_levels]") {
  const int64_t rows = 7, cols = 5003;
  const auto x = random_values<float>(rows * cols, 31, -2.0, 2.0);
  auto [expected, actual] = at_baseline_and_level([&] {
    std::vector<float> out(2 * rows);
    sum_rows<float>(x.data(), rows, cols, out.data());
    mean_rows<float>(x.data(), rows, cols, out.data() + rows);
    return out;
  });
  // Sums of 5003 values in another order.
  require_close(expected, actual, 1e-6, "sum_rows, mean_rows");
  auto [expected_m, actual_m] = at_baseline_and_level([&] {
    std::vector<float> out(3 * rows);
    max_rows<float>(x.data(), rows, cols, out.data());
    min_rows<float>(x.data(), rows, cols, out.data() + rows);
    std::vector<int64_t> index(rows);
    argmax_rows<float>(x.data(), rows, cols, index.data());
    for (int64_t r = 0; r < rows; ++r) out[2 * rows + r] = static_cast<float>(index[r]);
    return out;
  });
  require_bitwise(expected_m, actual_m, "max_rows, min_rows, argmax_rows");
}

TEST_CASE("softmax, norms and cross-entropy at the level under test match baseline",
          "[cpu_levels]") {
  const int64_t rows = 9, cols = 301;
  const auto x = random_values<float>(rows * cols, 41, -6.0, 6.0);
  const auto w = random_values<float>(cols, 42), b = random_values<float>(cols, 43);
  const auto dy = random_values<float>(rows * cols, 44);
  std::vector<int64_t> targets(rows);
  for (int64_t r = 0; r < rows; ++r) targets[r] = (r * 37) % cols;
  targets[3] = -100;  // ignored
  auto [expected, actual] = at_baseline_and_level([&] {
    Outputs out;
    std::vector<float> p(rows * cols), log_p(rows * cols);
    softmax_rows<float>(x.data(), rows, cols, p.data());
    log_softmax_rows<float>(x.data(), rows, cols, log_p.data());
    out.insert(out.end(), {{"softmax", p}, {"log_softmax", log_p}});
    std::vector<float> y(rows * cols), mean(rows), rstd(rows), dx(rows * cols), dw(cols),
        db(cols);
    layer_norm_forward<float>(x.data(), w.data(), b.data(), rows, cols, 1e-5, y.data(),
                              mean.data(), rstd.data());
    layer_norm_backward<float>(dy.data(), x.data(), mean.data(), rstd.data(), w.data(), rows,
                               cols, dx.data(), dw.data(), db.data());
    out.insert(out.end(), {{"layer_norm y", y}, {"its mean", mean}, {"its rstd", rstd},
                           {"layer_norm dx", dx}, {"dweight", dw}, {"dbias", db}});
    rms_norm_forward<float>(x.data(), w.data(), rows, cols, 1e-6, y.data(), rstd.data());
    rms_norm_backward<float>(dy.data(), x.data(), rstd.data(), w.data(), rows, cols, dx.data(),
                             dw.data());
    out.insert(out.end(), {{"rms_norm y", y}, {"its rstd", rstd}, {"rms_norm dx", dx},
                           {"dweight", dw}});
    std::vector<float> loss(rows), row_max(rows), row_log_sum(rows), dlogits(rows * cols);
    cross_entropy_forward<float>(x.data(), targets.data(), rows, cols, -100, 0.1, loss.data(),
                                 row_max.data(), row_log_sum.data());
    cross_entropy_backward<float>(x.data(), targets.data(), row_max.data(), row_log_sum.data(),
                                  rows, cols, -100, 0.1, 1.0 / rows, dlogits.data());
    out.insert(out.end(), {{"cross_entropy loss", loss}, {"its row max", row_max},
                           {"its row log-sum", row_log_sum}, {"dlogits", dlogits}});
    return out;
  });
  // Row sums of 301 terms in another order, and Eigen's exp at another vector width.
  require_close(expected, actual, 1e-6);
}

TEST_CASE("attention at the level under test matches baseline", "[cpu_levels]") {
  const AttentionDims dims{.batch = 2, .q_heads = 4, .kv_heads = 2, .q_len = 13, .kv_len = 13,
                           .head_dim = 16, .causal = true, .scale = 0.25};
  const int64_t q_size = 2 * 4 * 13 * 16, kv_size = 2 * 2 * 13 * 16;
  const auto q = random_values<float>(q_size, 51), k = random_values<float>(kv_size, 52);
  const auto v = random_values<float>(kv_size, 53), dout = random_values<float>(q_size, 54);
  auto [expected, actual] = at_baseline_and_level([&] {
    std::vector<float> out(q_size), lse(2 * 4 * 13), dq(q_size), dk(kv_size), dv(kv_size);
    attention_forward<float>(q.data(), k.data(), v.data(), dims, out.data(), lse.data());
    attention_backward<float>(q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(),
                              dims, dq.data(), dk.data(), dv.data());
    return Outputs{{"attention out", out}, {"lse", lse}, {"dq", dq}, {"dk", dk}, {"dv", dv}};
  });
  require_close(expected, actual, 1e-6);
}

TEST_CASE("embeddings and the fused optimizers at the level under test are bitwise equal to "
          "baseline",
          "[cpu_levels]") {
  const int64_t rows = 50, cols = 33, tokens = 80;
  const auto table = random_values<float>(rows * cols, 61);
  const auto grad_out = random_values<float>(tokens * cols, 62);
  std::vector<int64_t> indices(tokens);
  for (int64_t t = 0; t < tokens; ++t) indices[t] = (t * 7) % rows;
  auto [expected, actual] = at_baseline_and_level([&] {
    std::vector<float> out(tokens * cols), grad_table(rows * cols);
    embedding_forward<float>(table.data(), cols, indices.data(), tokens, out.data());
    embedding_backward<float>(grad_out.data(), indices.data(), tokens, rows, cols,
                              grad_table.data());
    out.insert(out.end(), grad_table.begin(), grad_table.end());
    return out;
  });
  require_bitwise(expected, actual, "embedding forward and backward");

  const int64_t numel = 1000;
  const auto grad = random_values<float>(numel, 63);
  auto [expected_adamw, actual_adamw] = at_baseline_and_level([&] {
    std::vector<float> param = random_values<float>(numel, 64), m(numel, 0.0f), v(numel, 0.0f);
    std::vector<bf16> grad_h(numel);
    for (int64_t i = 0; i < numel; ++i) grad_h[i] = bf16(grad[i]);
    std::vector<float> param_h = param, m_h(numel, 0.0f), v_h(numel, 0.0f);
    const AdamWHyper hyper{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                           .weight_decay = 0.1};
    for (int64_t step = 1; step <= 3; ++step) {
      const AdamWTensor<float, float> t{param.data(), grad.data(), m.data(), v.data(), numel, step};
      adamw<float, float>(&t, 1, hyper);
      const AdamWTensor<float, bf16> th{param_h.data(), grad_h.data(), m_h.data(), v_h.data(),
                                        numel, step};
      adamw<float, bf16>(&th, 1, hyper);
    }
    std::vector<float> sgd_param = random_values<float>(numel, 65), buffer(numel);
    const SGDHyper sgd_hyper{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01,
                             .nesterov = true};
    for (int64_t step = 1; step <= 3; ++step) {
      const SGDTensor<float> t{sgd_param.data(), grad.data(), buffer.data(), numel, step};
      sgd<float>(&t, 1, sgd_hyper);
    }
    for (const auto* x : {&m, &v, &param_h, &sgd_param, &buffer}) {
      param.insert(param.end(), x->begin(), x->end());
    }
    return param;
  });
  require_bitwise(expected_adamw, actual_adamw, "fused AdamW (f32 and bf16 gradients) and SGD");
}

TEST_CASE("block quantization at the level under test is bitwise equal to baseline", "[cpu_levels]") {
  const int64_t n = 4099;
  auto values = random_values<float>(n, 71, -3.0, 3.0);
  values[700] = std::numeric_limits<float>::quiet_NaN();  // a non-finite block
  for (const int bits : {8, 4}) {
    auto [expected, actual] = at_baseline_and_level([&] {
      const int64_t block = 256, blocks = (n + block - 1) / block;
      std::vector<uint8_t> codes(static_cast<size_t>(bits == 8 ? n : (n + 1) / 2));
      std::vector<float> absmax(static_cast<size_t>(blocks)), back(static_cast<size_t>(n));
      block_quantize<float>(values.data(), n, block, bits, codes.data(), absmax.data());
      block_dequantize<float>(codes.data(), absmax.data(), n, block, bits, back.data());
      std::vector<float> out(codes.begin(), codes.end());
      out.insert(out.end(), absmax.begin(), absmax.end());
      out.insert(out.end(), back.begin(), back.end());
      return out;
    });
    require_bitwise(expected, actual, bits == 8 ? "int8 block quantization" : "int4 block quantization");
  }
}
