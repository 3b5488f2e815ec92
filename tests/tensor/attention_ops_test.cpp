// The transformer ops scaled_dot_product_attention (dtr/tensor/ops/attention.h),
// rope (dtr/tensor/ops/rope.h) and dropout (dtr/tensor/ops/dropout.h): forward against
// double loops written here (causal and grouped-query attention, the rope
// rotation), gradcheck of every differentiable input, the causal mask ignoring
// later keys, rope keeping pair norms, dropout's reproducible mask and kept
// fraction, bf16 within a stated tolerance, meta shapes and error messages.
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/attention.h"
#include "dtr/tensor/ops/dropout.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/matmul.h"
#include "dtr/tensor/ops/rope.h"
#include "dtr/tensor/ops/softmax.h"
#include "dtr/tensor/random.h"
#include "tests/support/gradcheck.h"
#include "tests/support/values.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

using namespace dtr;
using dtr::testing::values_of;
using dtr::testing::check_close;

namespace {

// Attention of row-major q [B, Hq, T, D], k and v [B, Hkv, S, D], in double.
std::vector<double> attention_reference(const Tensor& qt, const Tensor& kt, const Tensor& vt,
                                        bool causal, double scale) {
  const std::vector<double> q = values_of(qt), k = values_of(kt), v = values_of(vt);
  const int64_t B = qt.size(0), Hq = qt.size(1), T = qt.size(2), D = qt.size(3);
  const int64_t Hkv = kt.size(1), S = kt.size(2);
  std::vector<double> out(q.size(), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t g = h / (Hq / Hkv);
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> w(S, 0.0);
        double m = -std::numeric_limits<double>::infinity();
        bool any = false;
        for (int64_t s = 0; s < S; ++s) {
          if (causal && s > t + (S - T)) continue;
          double dot = 0;
          for (int64_t i = 0; i < D; ++i) {
            dot += q[((b * Hq + h) * T + t) * D + i] * k[((b * Hkv + g) * S + s) * D + i];
          }
          w[s] = dot * scale;
          m = std::max(m, w[s]);
          any = true;
        }
        if (!any) continue;
        double total = 0;
        for (int64_t s = 0; s < S; ++s) {
          w[s] = (causal && s > t + (S - T)) ? 0.0 : std::exp(w[s] - m);
          total += w[s];
        }
        for (int64_t s = 0; s < S; ++s) {
          for (int64_t i = 0; i < D; ++i) {
            out[((b * Hq + h) * T + t) * D + i] +=
                w[s] / total * v[((b * Hkv + g) * S + s) * D + i];
          }
        }
      }
    }
  }
  return out;
}

// Rope of row-major x [B, T, H, D] in double, interleaved pairs.
std::vector<double> rope_reference(const Tensor& xt, double theta, int64_t offset) {
  const std::vector<double> x = values_of(xt);
  const int64_t B = xt.size(0), T = xt.size(1), H = xt.size(2), D = xt.size(3);
  std::vector<double> y(x.size());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t i = 0; i < D / 2; ++i) {
          const double a = static_cast<double>(offset + t) * std::pow(theta, -2.0 * i / D);
          const int64_t base = ((b * T + t) * H + h) * D + 2 * i;
          y[base] = x[base] * std::cos(a) - x[base + 1] * std::sin(a);
          y[base + 1] = x[base] * std::sin(a) + x[base + 1] * std::cos(a);
        }
      }
    }
  }
  return y;
}

}  // namespace

// --- attention ---

TEST_CASE("attention matches a double reference with and without causal mask and GQA", "[attention]") {
  Generator gen(11);
  struct Case {
    int64_t hq, hkv, t, s;
  };
  for (Case c : {Case{2, 2, 4, 4}, Case{4, 2, 3, 5}, Case{6, 2, 5, 5}, Case{4, 1, 5, 3}}) {
    for (bool causal : {false, true}) {
      CAPTURE(c.hq, c.hkv, c.t, c.s, causal);
      Tensor q = randn({2, c.hq, c.t, 8}, {}, &gen);
      Tensor k = randn({2, c.hkv, c.s, 8}, {}, &gen);
      Tensor v = randn({2, c.hkv, c.s, 8}, {}, &gen);
      Tensor out = scaled_dot_product_attention(q, k, v, causal);
      REQUIRE(out.sizes() == q.sizes());
      check_close(values_of(out), attention_reference(q, k, v, causal, 1.0 / std::sqrt(8.0)), 1e-5);
      check_close(values_of(scaled_dot_product_attention(q, k, v, causal, 0.3)),
                  attention_reference(q, k, v, causal, 0.3), 1e-5);
    }
  }
}

TEST_CASE("attention reads non-contiguous q k v like their contiguous copies", "[attention]") {
  Generator gen(12);
  Tensor q = randn({2, 5, 4, 8}, {}, &gen).transpose(1, 2);  // [2, 4, 5, 8] view
  Tensor k = randn({2, 5, 2, 8}, {}, &gen).transpose(1, 2);
  Tensor v = randn({2, 5, 2, 8}, {}, &gen).transpose(1, 2);
  CHECK(values_of(scaled_dot_product_attention(q, k, v, true)) ==
        values_of(scaled_dot_product_attention(q.contiguous(), k.contiguous(), v.contiguous(), true)));
}

TEST_CASE("causal attention row t ignores keys and values after t plus S minus T", "[attention]") {
  Generator gen(13);
  const int64_t T = 4, S = 6;
  Tensor q = randn({1, 2, T, 4}, {.dtype = DType::f64}, &gen);
  Tensor k = randn({1, 1, S, 4}, {.dtype = DType::f64}, &gen);
  Tensor v = randn({1, 1, S, 4}, {.dtype = DType::f64}, &gen);
  const std::vector<double> base = values_of(scaled_dot_product_attention(q, k, v, true));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t first_hidden = t + (S - T) + 1;
    if (first_hidden >= S) continue;
    Tensor k2 = k.clone(), v2 = v.clone();
    k2.narrow(2, first_hidden, S - first_hidden).fill_(7.0);
    v2.narrow(2, first_hidden, S - first_hidden).fill_(-9.0);
    const std::vector<double> got = values_of(scaled_dot_product_attention(q, k2, v2, true));
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t i = 0; i < 4; ++i) {
        const size_t idx = static_cast<size_t>((h * T + t) * 4 + i);
        CHECK(got[idx] == base[idx]);
      }
    }
    // The unmasked op does see them.
    CHECK(values_of(scaled_dot_product_attention(q, k2, v2, false)) !=
          values_of(scaled_dot_product_attention(q, k, v, false)));
  }
}

TEST_CASE("causal attention with more queries than keys gives 0 for rows that see no key", "[attention]") {
  Tensor q = ones({1, 1, 4, 2}, {.dtype = DType::f64}).requires_grad_();
  Tensor k = ones({1, 1, 2, 2}, {.dtype = DType::f64}).requires_grad_();
  Tensor v = ones({1, 1, 2, 2}, {.dtype = DType::f64}).requires_grad_();
  Tensor out = scaled_dot_product_attention(q, k, v, true);
  // Rows 0 and 1 see keys <= t - 2: none.
  CHECK(values_of(out) == std::vector<double>{0, 0, 0, 0, 1, 1, 1, 1});
  out.backward(ones_like(out));
  CHECK(values_of(q.grad()) == std::vector<double>(8, 0.0));
}

TEST_CASE("gradcheck of attention for q k and v, causal and grouped", "[attention]") {
  Generator gen(14);
  const TensorOptions opt{.dtype = DType::f64};
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    Tensor q = randn({2, 4, 3, 4}, opt, &gen).requires_grad_();
    Tensor k = randn({2, 2, 5, 4}, opt, &gen).requires_grad_();
    Tensor v = randn({2, 2, 5, 4}, opt, &gen).requires_grad_();
    CHECK(testing::gradcheck(
              [causal](const std::vector<Tensor>& in) {
                return scaled_dot_product_attention(in[0], in[1], in[2], causal);
              },
              {q, k, v}) == "");
  }
  // Ordinary multi-head, T == S, non-contiguous q and an explicit scale; only k needs grad.
  Tensor q = randn({1, 3, 2, 4}, opt, &gen).transpose(1, 2).requires_grad_();
  Tensor k = randn({1, 2, 3, 4}, opt, &gen).requires_grad_();
  Tensor v = randn({1, 2, 3, 4}, opt, &gen);
  CHECK(testing::gradcheck(
            [&v](const std::vector<Tensor>& in) {
              return scaled_dot_product_attention(in[0], in[1], v, true, 0.7);
            },
            {q, k}) == "");
}

// The attention of q [B, Hq, T, D], k and v [B, Hkv, S, D] composed of matmul, where
// and softmax (kv heads repeated for their query heads), so that autograd through
// those ops gives reference gradients. Every row must see a key (S >= T if causal).
Tensor composite_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  const int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), S = k.size(2), group = Hq / Hkv;
  auto repeat_heads = [&](const Tensor& x) {
    return x.unsqueeze(2).expand({B, Hkv, group, S, D}).reshape({B, Hq, S, D});
  };
  Tensor scores = matmul(q, repeat_heads(k).transpose(-1, -2)) * scale;
  if (causal) {  // key s is hidden from row t when s > t + S - T
    Tensor s_index = arange(S, {.dtype = DType::f64}).reshape({1, S});
    Tensor t_index = arange(T, {.dtype = DType::f64}).reshape({T, 1});
    Tensor hidden = gt(s_index, t_index + static_cast<double>(S - T));
    scores = where(hidden, full({}, -std::numeric_limits<double>::infinity(), {.dtype = DType::f64}), scores);
  }
  return matmul(softmax(scores, -1), repeat_heads(v));
}

TEST_CASE("attention over several query blocks matches the composed ops, values and gradients", "[attention]") {
  Generator gen(16);
  const TensorOptions opt{.dtype = DType::f64};
  struct Case {
    int64_t hq, hkv, t, s;
    bool causal;
  };
  // T beyond one 64-row block of the CPU kernel, a last partial block, a causal
  // offset S - T, grouped heads.
  for (Case c : {Case{4, 2, 150, 170, true}, Case{2, 2, 130, 130, true}, Case{3, 1, 70, 200, false}}) {
    CAPTURE(c.hq, c.hkv, c.t, c.s, c.causal);
    Tensor q = (randn({2, c.hq, c.t, 8}, opt, &gen) * 0.5).detach().requires_grad_();
    Tensor k = randn({2, c.hkv, c.s, 8}, opt, &gen).requires_grad_();
    Tensor v = randn({2, c.hkv, c.s, 8}, opt, &gen).requires_grad_();
    Tensor upstream = randn({2, c.hq, c.t, 8}, opt, &gen);
    Tensor out = scaled_dot_product_attention(q, k, v, c.causal, 0.4);
    out.backward(upstream);
    const std::vector<double> out_v = values_of(out), dq = values_of(q.grad()), dk = values_of(k.grad()),
                              dv = values_of(v.grad());
    Tensor q2 = q.detach().requires_grad_(), k2 = k.detach().requires_grad_(), v2 = v.detach().requires_grad_();
    Tensor ref = composite_attention(q2, k2, v2, c.causal, 0.4);
    ref.backward(upstream);
    check_close(out_v, values_of(ref), 1e-12);
    check_close(dq, values_of(q2.grad()), 1e-11);
    check_close(dk, values_of(k2.grad()), 1e-11);
    check_close(dv, values_of(v2.grad()), 1e-11);
  }
}

TEST_CASE("attention in bf16 and f16 stays within 3 percent of the f64 reference", "[attention]") {
  Generator gen(15);
  Tensor q = randn({1, 4, 6, 16}, {}, &gen);
  Tensor k = randn({1, 2, 6, 16}, {}, &gen);
  Tensor v = randn({1, 2, 6, 16}, {}, &gen);
  for (DType dtype : {DType::bf16, DType::f16}) {
    CAPTURE(dtype);
    Tensor qh = q.to(dtype), kh = k.to(dtype), vh = v.to(dtype);
    Tensor out = scaled_dot_product_attention(qh, kh, vh, true);
    CHECK(out.dtype() == dtype);
    // Reference on the rounded inputs: only the output rounding and float compute differ.
    check_close(values_of(out), attention_reference(qh, kh, vh, true, 0.25), 3e-2);
  }
}

TEST_CASE("attention on meta gives a meta output and bad shapes give clear errors", "[attention]") {
  const TensorOptions meta{.device = Device::meta()};
  Tensor m = scaled_dot_product_attention(empty({2, 4, 3, 8}, meta), empty({2, 2, 5, 8}, meta),
                                          empty({2, 2, 5, 8}, meta), true);
  CHECK(m.device().is_meta());
  CHECK(m.sizes() == Shape{2, 4, 3, 8});

  Tensor q = zeros({2, 4, 3, 8});
  Tensor k = zeros({2, 2, 5, 8});
  const std::string op = "scaled_dot_product_attention: ";
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, zeros({2, 3, 5, 8}), zeros({2, 3, 5, 8})),
                    Catch::Contains(op + "the number of query heads Hq = 4 must be a multiple of "
                                         "the number of kv heads Hkv = 3"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, zeros({2, 2, 4, 8})),
                    Catch::Contains(op + "k and v must have the same shape, got k [2, 2, 5, 8] and v [2, 2, 4, 8]"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, zeros({1, 2, 5, 8}), zeros({1, 2, 5, 8})),
                    Catch::Contains(op + "batch sizes differ"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, zeros({2, 2, 5, 4}), zeros({2, 2, 5, 4})),
                    Catch::Contains(op + "head dims differ"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(zeros({4, 3, 8}), k, k),
                    Catch::Contains(op + "expected 4-D q [B, Hq, T, D]"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k.to(DType::f64), k),
                    Catch::Contains(op + "q, k and v must share one dtype"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q.to(DType::i64), k.to(DType::i64), k.to(DType::i64)),
                    Catch::Contains(op + "expected q of a floating dtype"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, empty({2, 2, 5, 8}, meta)),
                    Catch::Contains("scaled_dot_product_attention"));
}

// --- rope ---

TEST_CASE("rope rotates interleaved pairs like the double reference", "[attention]") {
  Generator gen(21);
  Tensor x = randn({2, 5, 3, 8}, {}, &gen);
  check_close(values_of(rope(x)), rope_reference(x, 10000.0, 0), 1e-5);
  check_close(values_of(rope(x, 500.0, 7)), rope_reference(x, 500.0, 7), 1e-5);
  // Position 0 is the identity; a position offset equals slicing a longer sequence.
  CHECK(values_of(rope(x).narrow(1, 0, 1)) == values_of(x.narrow(1, 0, 1)));
  Tensor longer = randn({1, 6, 2, 4}, {.dtype = DType::f64}, &gen);
  check_close(values_of(rope(longer).narrow(1, 4, 2)),
              values_of(rope(longer.narrow(1, 4, 2), 10000.0, 4)), 1e-12);
  // Non-contiguous input.
  Tensor xt = randn({2, 3, 5, 8}, {}, &gen).transpose(1, 2);
  CHECK(values_of(rope(xt)) == values_of(rope(xt.contiguous())));
}

TEST_CASE("rope preserves the norm of every pair and backward is the inverse rotation", "[attention]") {
  Generator gen(22);
  Tensor x = randn({1, 9, 2, 6}, {.dtype = DType::f64}, &gen);
  const std::vector<double> xv = values_of(x), yv = values_of(rope(x, 10000.0, 3));
  for (size_t i = 0; i < xv.size(); i += 2) {
    CHECK(std::hypot(yv[i], yv[i + 1]) == Approx(std::hypot(xv[i], xv[i + 1])).epsilon(1e-12));
  }
  CHECK(testing::gradcheck([](const std::vector<Tensor>& in) { return rope(in[0], 100.0, 2); },
                           {randn({2, 3, 2, 4}, {.dtype = DType::f64}, &gen).requires_grad_()}) == "");
  // The gradient of sum(w * rope(x)) is rope^-1(w): rotating it forward gives w back.
  Tensor xr = randn({1, 4, 1, 4}, {.dtype = DType::f64}, &gen).requires_grad_();
  Tensor w = randn({1, 4, 1, 4}, {.dtype = DType::f64}, &gen);
  rope(xr).backward(w);
  check_close(values_of(rope(xr.grad())), values_of(w), 1e-12);
}

TEST_CASE("rope in bf16 stays within 1 percent of the f64 reference", "[attention]") {
  Generator gen(23);
  Tensor x = randn({1, 16, 2, 8}, {}, &gen).to(DType::bf16);
  Tensor y = rope(x);
  CHECK(y.dtype() == DType::bf16);
  check_close(values_of(y), rope_reference(x, 10000.0, 0), 1e-2);
}

TEST_CASE("rope on meta and with bad input gives meta shapes and clear errors", "[attention]") {
  CHECK(rope(empty({1, 2, 3, 4}, {.device = Device::meta()})).device().is_meta());
  CHECK_THROWS_WITH(rope(zeros({2, 3, 4})), Catch::Contains("rope: expected x of shape [B, T, H, D], got shape [2, 3, 4]"));
  CHECK_THROWS_WITH(rope(zeros({1, 2, 3, 5})), Catch::Contains("rope: the head dim D must be even"));
  CHECK_THROWS_WITH(rope(zeros({1, 2, 3, 4}), 0.0), Catch::Contains("rope: theta must be positive"));
  CHECK_THROWS_WITH(rope(zeros({1, 2, 3, 4}), 10000.0, -1), Catch::Contains("rope: position_offset must be >= 0"));
  CHECK_THROWS_WITH(rope(zeros({1, 2, 3, 4}, {.dtype = DType::i32})), Catch::Contains("rope: expected x of a floating dtype"));
}

// --- dropout ---

TEST_CASE("dropout masks are reproducible from the generator state", "[attention]") {
  Generator gen(31);
  Tensor x = ones({64, 32});
  const GeneratorState start = gen.state();
  const std::vector<double> a = values_of(dropout(x, 0.3, true, &gen));
  CHECK(gen.state() != start);  // the draw advanced the generator
  const std::vector<double> b = values_of(dropout(x, 0.3, true, &gen));
  CHECK(a != b);  // a different state gives a different mask
  gen.set_state(start);
  CHECK(values_of(dropout(x, 0.3, true, &gen)) == a);  // replay
  Generator other(32);
  CHECK(values_of(dropout(x, 0.3, true, &other)) != a);
  // The mask does not depend on the dtype.
  gen.set_state(start);
  const std::vector<double> a64 = values_of(dropout(x.to(DType::f64), 0.3, true, &gen));
  for (size_t i = 0; i < a.size(); ++i) CHECK((a64[i] == 0.0) == (a[i] == 0.0));
  // Kept elements are scaled by 1 / (1 - p), dropped ones are 0.
  for (double v : a) CHECK((v == 0.0 || v == Approx(1.0 / 0.7).epsilon(1e-6)));
}

TEST_CASE("dropout keeps about 1 minus p of 1e5 elements and is identity or zeros at the edges", "[attention]") {
  Generator gen(33);
  Tensor x = ones({100000});
  for (double p : {0.1, 0.5, 0.9}) {
    CAPTURE(p);
    const std::vector<double> v = values_of(dropout(x, p, true, &gen));
    const double kept = static_cast<double>(std::count_if(v.begin(), v.end(), [](double e) { return e != 0.0; }));
    // Binomial: std of the fraction <= 0.0016; allow 5 std.
    CHECK(kept / 1e5 == Approx(1.0 - p).margin(0.008));
  }
  const GeneratorState before = gen.state();
  CHECK(dropout(x, 0.0, true, &gen).is_same(x));
  CHECK(dropout(x, 0.5, false, &gen).is_same(x));
  CHECK(values_of(dropout(x, 1.0, true, &gen)) == std::vector<double>(100000, 0.0));
  CHECK(gen.state() == before);  // none of these draw
  CHECK(dropout(empty({3, 4}, {.device = Device::meta()}), 0.5, true, &gen).device().is_meta());
}

TEST_CASE("gradcheck of dropout with a fixed generator state", "[attention]") {
  Generator gen(34);
  const GeneratorState state = gen.state();
  Tensor x = randn({4, 5}, {.dtype = DType::f64}).requires_grad_();
  CHECK(testing::gradcheck(
            [&](const std::vector<Tensor>& in) {
              gen.set_state(state);
              return dropout(in[0], 0.4, true, &gen);
            },
            {x}) == "");
  // The gradient is exactly the mask scale.
  gen.set_state(state);
  Tensor y = dropout(x, 0.4, true, &gen);
  x.set_grad(Tensor());
  y.backward(ones_like(y));
  const std::vector<double> g = values_of(x.grad()), yv = values_of(y);
  for (size_t i = 0; i < g.size(); ++i) {
    CHECK(g[i] == (yv[i] == 0.0 ? 0.0 : 1.0 / 0.6));
  }
  CHECK(testing::gradcheck([](const std::vector<Tensor>& in) { return dropout(in[0], 1.0, true); },
                           {x}) == "");
}

TEST_CASE("dropout rejects bad p and dtypes with clear errors", "[attention]") {
  CHECK_THROWS_WITH(dropout(ones({3}), 1.5, true), Catch::Contains("dropout: p must be in [0, 1], got 1.5"));
  CHECK_THROWS_WITH(dropout(ones({3}), -0.1, true), Catch::Contains("dropout: p must be in [0, 1]"));
  CHECK_THROWS_WITH(dropout(ones({3}, {.dtype = DType::i64}), 0.5, true),
                    Catch::Contains("dropout: expected x of a floating dtype"));
}
