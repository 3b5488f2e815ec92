// sum / mean / max / min / argmax on Tensors (dtr/tensor/ops/reduce.h) against
// plain double loops over the logical elements: each dim of a 3-D tensor,
// several dims, keepdim, whole-tensor, non-contiguous views, integer and bf16
// inputs, NaN, thread-count independence, meta inputs and error messages.
#include "dtr/kernels/cpu/parallel.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/reduce.h"
#include "tests/support/values.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace dtr;
using dtr::testing::ThreadCountGuard;
using dtr::testing::values_of;

namespace {

Tensor random_tensor(const Shape& shape, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> v(numel_of(shape));
  for (float& x : v) x = dist(gen);
  return from_vector(v, shape);
}

// The elements of `x` (row-major, of `shape`) grouped by output position when
// `dims` are reduced; each group lists its elements in row-major order of the
// reduced dims (so a position in the group is the flat index within them).
std::vector<std::vector<double>> groups(const std::vector<double>& x, const Shape& shape,
                                        const std::vector<int64_t>& dims) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  std::vector<bool> reduced(nd, false);
  for (int64_t d : dims) reduced[d] = true;
  int64_t outputs = 1;
  for (int64_t d = 0; d < nd; ++d) {
    if (!reduced[d]) outputs *= shape[d];
  }
  std::vector<std::vector<double>> out(outputs);
  std::vector<int64_t> index(nd, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t rem = static_cast<int64_t>(i);
    for (int64_t d = nd - 1; d >= 0; --d) {
      index[d] = rem % shape[d];
      rem /= shape[d];
    }
    int64_t o = 0;
    for (int64_t d = 0; d < nd; ++d) {
      if (!reduced[d]) o = o * shape[d] + index[d];
    }
    out[o].push_back(x[i]);
  }
  return out;
}

double ref_sum(const std::vector<double>& g) {
  double s = 0;
  for (double v : g) s += v;
  return s;
}
double ref_max(const std::vector<double>& g) {
  double m = g[0];
  for (double v : g) m = std::max(m, v);
  return m;
}
double ref_min(const std::vector<double>& g) {
  double m = g[0];
  for (double v : g) m = std::min(m, v);
  return m;
}
int64_t ref_argmax(const std::vector<double>& g) {
  int64_t at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i])) return static_cast<int64_t>(i);
    if (g[i] > g[at]) at = static_cast<int64_t>(i);
  }
  return at;
}

}  // namespace

TEST_CASE("every reduction along each dim of a 3-D tensor matches double loops", "[reduce]") {
  const Shape shape = {3, 4, 5};
  Tensor t = random_tensor(shape, 1);
  const std::vector<double> x = values_of(t);
  const std::vector<Shape> out_shapes = {{4, 5}, {3, 5}, {3, 4}};
  for (int64_t d = 0; d < 3; ++d) {
    for (int64_t dim : {d, d - 3}) {  // the same dim, positive and negative
      CAPTURE(dim);
      const auto g = groups(x, shape, {d});
      Tensor s = sum(t, {dim}), m = mean(t, {dim}), hi = max(t, dim), lo = min(t, dim),
             at = argmax(t, dim);
      CHECK(s.sizes() == out_shapes[d]);
      CHECK(hi.sizes() == out_shapes[d]);
      CHECK(at.sizes() == out_shapes[d]);
      CHECK(s.dtype() == DType::f32);
      CHECK(at.dtype() == DType::i64);
      auto sv = s.to_vector<float>(), mv = m.to_vector<float>(), hv = hi.to_vector<float>(),
           lv = lo.to_vector<float>();
      auto av = at.to_vector<int64_t>();
      for (size_t o = 0; o < g.size(); ++o) {
        CAPTURE(o);
        CHECK(sv[o] == Approx(ref_sum(g[o])).margin(1e-5));
        CHECK(mv[o] == Approx(ref_sum(g[o]) / g[o].size()).margin(1e-6));
        CHECK(hv[o] == ref_max(g[o]));
        CHECK(lv[o] == ref_min(g[o]));
        CHECK(av[o] == ref_argmax(g[o]));
      }
    }
  }
}

TEST_CASE("sum and mean over several dims, keepdim and whole-tensor", "[reduce]") {
  const Shape shape = {3, 4, 5};
  Tensor t = random_tensor(shape, 2);
  const std::vector<double> x = values_of(t);

  Tensor s02 = sum(t, {0, 2});
  Tensor s02_neg = sum(t, {-1, -3});
  Tensor m02_keep = mean(t, {2, 0}, true);
  CHECK(s02.sizes() == Shape{4});
  CHECK(m02_keep.sizes() == Shape{1, 4, 1});
  const auto g = groups(x, shape, {0, 2});
  for (int64_t o = 0; o < 4; ++o) {
    CHECK(s02.to_vector<float>()[o] == Approx(ref_sum(g[o])).margin(1e-5));
    CHECK(s02_neg.to_vector<float>()[o] == s02.to_vector<float>()[o]);
    CHECK(m02_keep.to_vector<float>()[o] == Approx(ref_sum(g[o]) / 15).margin(1e-6));
  }

  Tensor keep1 = max(t, 1, true);
  CHECK(keep1.sizes() == Shape{3, 1, 5});
  CHECK(argmax(t, -1, true).sizes() == Shape{3, 4, 1});

  // Whole tensor: a 0-d result; an empty dims list means every dim.
  double total = ref_sum(x);
  Tensor all = sum(t);
  CHECK(all.dim() == 0);
  CHECK(all.item() == Approx(total).margin(1e-4));
  CHECK(sum(t, {}).item() == all.item());
  CHECK(sum(t, {}, true).sizes() == Shape{1, 1, 1});
  CHECK(sum(t, {0, 1, 2}).item() == Approx(total).margin(1e-4));
  CHECK(mean(t).item() == Approx(total / 60).margin(1e-6));
  CHECK(max(t).item() == ref_max(x));
  CHECK(min(t).item() == ref_min(x));
  Tensor flat_arg = argmax(t);
  CHECK(flat_arg.dim() == 0);
  CHECK(flat_arg.dtype() == DType::i64);
  CHECK(flat_arg.item<int64_t>() == ref_argmax(x));
}

TEST_CASE("reductions of transposed and sliced views use the logical elements", "[reduce]") {
  Tensor base = random_tensor({6, 8, 5}, 3);
  Tensor transposed = base.transpose(0, 2);                // [5, 8, 6]
  Tensor sliced = base.slice(1, 1, 8, 3).narrow(0, 2, 3);  // [3, 3, 5], strided
  for (const Tensor& v : {transposed, sliced}) {
    CHECK_FALSE(v.is_contiguous());
    const std::vector<double> x = values_of(v);
    for (int64_t d = 0; d < 3; ++d) {
      CAPTURE(v.sizes(), d);
      const auto g = groups(x, v.sizes(), {d});
      auto sv = sum(v, {d}).to_vector<float>();
      auto hv = max(v, d).to_vector<float>();
      auto av = argmax(v, d).to_vector<int64_t>();
      for (size_t o = 0; o < g.size(); ++o) {
        CHECK(sv[o] == Approx(ref_sum(g[o])).margin(1e-5));
        CHECK(hv[o] == ref_max(g[o]));
        CHECK(av[o] == ref_argmax(g[o]));
      }
    }
    CHECK(argmax(v).item<int64_t>() == ref_argmax(x));
    CHECK(sum(v, {0, 2}).to_vector<float>()[1] ==
          Approx(ref_sum(groups(x, v.sizes(), {0, 2})[1])).margin(1e-5));
  }
}

TEST_CASE("integer sums return i64, integer max/min keep the dtype", "[reduce]") {
  Tensor u = full({3, 1000}, 250, {.dtype = DType::u8});
  Tensor su = sum(u, {1});
  CHECK(su.dtype() == DType::i64);
  CHECK(su.to_vector<int64_t>() == std::vector<int64_t>{250000, 250000, 250000});
  CHECK(sum(u).dtype() == DType::i64);
  CHECK(sum(u).item<int64_t>() == 750000);

  Tensor i = from_vector<int64_t>({4000000000LL, -5, 7, 3000000000LL, 2, -9}, {2, 3});
  CHECK(sum(i, {0}).to_vector<int64_t>() == std::vector<int64_t>{7000000000LL, -3, -2});
  CHECK(sum(i, {1}).to_vector<int64_t>() == std::vector<int64_t>{4000000002LL, 2999999993LL});
  Tensor hi = max(i, 1);
  CHECK(hi.dtype() == DType::i64);
  CHECK(hi.to_vector<int64_t>() == std::vector<int64_t>{4000000000LL, 3000000000LL});
  CHECK(min(i, 0).to_vector<int64_t>() == std::vector<int64_t>{3000000000LL, -5, -9});
  CHECK(argmax(i, 0).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 0});

  Tensor small = from_vector<uint8_t>({3, 200, 0, 7}, {2, 2});
  Tensor smax = max(small, 1);
  CHECK(smax.dtype() == DType::u8);
  CHECK(smax.to_vector<uint8_t>() == std::vector<uint8_t>{200, 7});
}

TEST_CASE("bf16 sums accumulate in float: 4096 ones sum to exactly 4096", "[reduce]") {
  // Accumulating in bf16 would stall at 256.
  Tensor ones_bf16 = ones({4096}, {.dtype = DType::bf16});
  Tensor s = sum(ones_bf16);
  CHECK(s.dtype() == DType::bf16);
  CHECK(s.item() == 4096.0);
  CHECK(sum(ones({8, 4096}, {.dtype = DType::bf16}), {1}).to(DType::f32).to_vector<float>() ==
        std::vector<float>(8, 4096.0f));
  CHECK(mean(ones_bf16).item() == 1.0);

  // bf16 along a dim vs the double reference of the same (bf16-rounded) values.
  Tensor b = random_tensor({4, 6, 3}, 4).to(DType::bf16);
  const std::vector<double> x = values_of(b);
  const auto g = groups(x, b.sizes(), {1});
  auto sv = values_of(sum(b, {1}));
  auto hv = values_of(max(b, 1));
  for (size_t o = 0; o < g.size(); ++o) {
    // One bf16 rounding of the result: relative error 2^-9.
    CHECK(sv[o] == Approx(ref_sum(g[o])).epsilon(1.0 / 256).margin(1e-2));
    CHECK(hv[o] == ref_max(g[o]));
  }
}

TEST_CASE("max and argmax propagate NaN along a dim and over the whole tensor", "[reduce]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor t = from_vector<double>({1, nan, 3, nan, /**/ 4, 8, 2, 0}, {2, 4});
  auto hv = max(t, 1).to_vector<double>();
  CHECK(std::isnan(hv[0]));
  CHECK(hv[1] == 8);
  CHECK(argmax(t, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  CHECK(std::isnan(min(t, 1).to_vector<double>()[0]));
  CHECK(std::isnan(max(t).item()));
  CHECK(argmax(t).item<int64_t>() == 1);
  CHECK(argmax(t, 0).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0, 0});
}

TEST_CASE("sums are bitwise equal for 1 and 2 threads on a large tensor", "[reduce]") {
  ThreadCountGuard guard;
  Tensor t = random_tensor({4, 300000}, 5);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2}) {
    kernels::set_num_threads(threads);
    std::vector<float> r = {sum(t).item<float>(), mean(t).item<float>()};
    for (float v : sum(t, {1}).to_vector<float>()) r.push_back(v);
    for (float v : sum(t, {0}).to_vector<float>()) r.push_back(v);
    results.push_back(r);
  }
  REQUIRE(results[0].size() == results[1].size());
  CHECK(std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)) == 0);
  CHECK(results[0][0] == Approx(ref_sum(values_of(t))).margin(1e-2));
}

TEST_CASE("reducing an empty dim: sum is 0, mean is NaN", "[reduce]") {
  Tensor e = empty({2, 0, 3});
  Tensor s = sum(e, {1});
  CHECK(s.sizes() == Shape{2, 3});
  CHECK(s.to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(sum(e).item() == 0.0);
  CHECK(std::isnan(mean(e, {1}).to_vector<float>()[0]));
  CHECK(sum(e, {2}).sizes() == Shape{2, 0});
  CHECK(max(e, 2).sizes() == Shape{2, 0});  // nothing empty is reduced: fine
}

TEST_CASE("0-d tensors reduce to themselves", "[reduce]") {
  Tensor s = scalar_tensor(2.5, DType::f32);
  CHECK(sum(s).item() == 2.5);
  CHECK(sum(s, {0}).item() == 2.5);
  CHECK(max(s, -1).item() == 2.5);
  CHECK(argmax(s).item<int64_t>() == 0);
  CHECK(sum(scalar_tensor(7, DType::i32)).item<int64_t>() == 7);
}

TEST_CASE("meta inputs give meta outputs of the reduced shape and dtype", "[reduce]") {
  Tensor m = empty({4, 5, 6}, {.dtype = DType::i32, .device = Device::meta()});
  Tensor s = sum(m, {1}, true);
  CHECK(s.device().is_meta());
  CHECK(s.sizes() == Shape{4, 1, 6});
  CHECK(s.dtype() == DType::i64);
  CHECK(max(m, 0).sizes() == Shape{5, 6});
  CHECK(max(m, 0).dtype() == DType::i32);
  CHECK(argmax(m).sizes() == Shape{});
  Tensor f = empty({4, 5}, {.dtype = DType::bf16, .device = Device::meta()});
  CHECK(mean(f, {0}).dtype() == DType::bf16);
  CHECK(mean(f, {0}).device().is_meta());
}

TEST_CASE("reduction errors name the op, the dim and the shape", "[reduce]") {
  Tensor t = zeros({2, 3, 4});
  CHECK_THROWS_WITH(
      sum(t, {3}),
      Catch::Contains("sum: dim 3 is out of range for a 3-d tensor of shape [2, 3, 4]"));
  CHECK_THROWS_WITH(max(t, -4), Catch::Contains("max: dim -4 is out of range"));
  CHECK_THROWS_WITH(
      sum(t, {1, -2}),
      Catch::Contains("sum: dim 1 appears more than once in dims [1, -2] (shape [2, 3, 4])"));
  Tensor e = zeros({2, 0, 3});
  CHECK_THROWS_WITH(max(e, 1),
                    Catch::Contains("max: cannot reduce over dim 1 of size 0 (shape [2, 0, 3])"));
  CHECK_THROWS_WITH(argmax(e), Catch::Contains("argmax: cannot reduce over dim 1 of size 0"));
  CHECK_THROWS_WITH(min(e), Catch::Contains("min: cannot reduce over dim 1 of size 0"));
  CHECK_THROWS_WITH(mean(zeros({3}, {.dtype = DType::i64})),
                    Catch::Contains("mean: expected a floating dtype") && Catch::Contains("i64"));
  CHECK_THROWS_WITH(sum(scalar_tensor(1.0, DType::f32), {1}),
                    Catch::Contains("sum: dim 1 is out of range for a 0-d tensor"));
  // Errors come before the meta shortcut too.
  CHECK_THROWS_WITH(max(empty({0}, {.device = Device::meta()})),
                    Catch::Contains("max: cannot reduce over dim 0 of size 0"));
}
