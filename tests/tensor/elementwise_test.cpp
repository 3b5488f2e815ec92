// Elementwise tensor ops: broadcasting, strided inputs, dtype rules, errors, in-place
// ops and meta tensors, checked against references computed here in double.
// Tolerances: f32 within 1e-5 relative, f64 within 1e-12 relative, bf16 within 1 bf16
// ulp of the double reference rounded to bf16; integer results exact.
#include "dtr/tensor/ops/elementwise.h"

#include "dtr/tensor/factory.h"
#include "tests/support/values.h"

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

using namespace dtr;
using dtr::testing::bf16_order;
using dtr::testing::ref_sigmoid;

namespace {

// Compares a tensor's values with references in double; reports the first few misses.
template <class T>
void check_values(const Tensor& t, const std::vector<double>& ref, const std::string& what) {
  REQUIRE(t.dtype() == dtype_of<T>);
  std::vector<T> got = t.to_vector<T>();
  REQUIRE(got.size() == ref.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    double g = convert<double>(got[i]), r = ref[i];
    bool ok;
    if (std::isnan(r)) {
      ok = std::isnan(g);
    } else if constexpr (std::is_same_v<T, float>) {
      ok = std::abs(g - r) <= 1e-5 * std::abs(r) + 1e-37;
    } else if constexpr (std::is_same_v<T, double>) {
      ok = std::abs(g - r) <= 1e-12 * std::abs(r) + 1e-300;
    } else if constexpr (std::is_same_v<T, bf16>) {
      ok = std::abs(bf16_order(got[i]) - bf16_order(bf16(static_cast<float>(r)))) <= 1;
    } else {
      ok = g == r;
    }
    if (!ok) {
      ++bad;
      FAIL_CHECK(what << ": element " << i << " got " << g << ", reference " << r);
    }
  }
  CHECK(bad == 0);
}

template <class T>
std::vector<double> as_doubles(const Tensor& t) {
  std::vector<double> out;
  for (T v : t.to_vector<T>()) out.push_back(convert<double>(v));
  return out;
}

// A [rows, cols] tensor of dtype T holding lo..hi, returned transposed ([cols, rows], not
// contiguous), and its values in row-major order of the transposed view.
template <class T>
Tensor transposed_grid(int64_t rows, int64_t cols, double lo, double hi) {
  std::vector<T> v(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    v[i] = convert<T>(lo + (hi - lo) * (static_cast<double>(i) + 0.5) / (rows * cols));
  }
  return from_vector(v, {rows, cols}).t();
}

struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&)> op;
  double lo, hi;
  std::function<double(double)> ref;
};

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return -x; }, -3, 3, [](double x) { return -x; }},
      {"abs", [](const Tensor& x) { return abs(x); }, -3, 3, [](double x) { return std::abs(x); }},
      {"exp", [](const Tensor& x) { return exp(x); }, -10, 10,
       [](double x) { return std::exp(x); }},
      {"log", [](const Tensor& x) { return log(x); }, 0.01, 50,
       [](double x) { return std::log(x); }},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, 0, 50,
       [](double x) { return std::sqrt(x); }},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, 0.01, 50,
       [](double x) { return 1 / std::sqrt(x); }},
      {"square", [](const Tensor& x) { return square(x); }, -3, 3, [](double x) { return x * x; }},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, 0.1, 5,
       [](double x) { return 1 / x; }},
      {"sin", [](const Tensor& x) { return sin(x); }, -7, 7, [](double x) { return std::sin(x); }},
      {"cos", [](const Tensor& x) { return cos(x); }, -7, 7, [](double x) { return std::cos(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }, -4, 4,
       [](double x) { return std::tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, -20, 20, ref_sigmoid},
      {"relu", [](const Tensor& x) { return relu(x); }, -3, 3,
       [](double x) { return x > 0 ? x : 0; }},
      {"silu", [](const Tensor& x) { return silu(x); }, -20, 20,
       [](double x) { return x * ref_sigmoid(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }, -3, 3,
       [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApproximation::tanh); }, -3, 3,
       [](double x) {
         return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
       }},
  };
}

template <class T>
void check_unary_ops() {
  for (const UnaryCase& c : unary_cases()) {
    Tensor x = transposed_grid<T>(6, 35, c.lo, c.hi);
    REQUIRE_FALSE(x.is_contiguous());
    Tensor y = c.op(x);
    CHECK(y.sizes() == Shape{35, 6});
    std::vector<double> ref;
    for (double v : as_doubles<T>(x)) ref.push_back(c.ref(v));
    check_values<T>(y, ref, c.name);
  }
}

}  // namespace

TEST_CASE("unary ops read transposed inputs and match double references", "[elementwise][ops]") {
  SECTION("f32") { check_unary_ops<float>(); }
  SECTION("f64") { check_unary_ops<double>(); }
  SECTION("bf16") { check_unary_ops<bf16>(); }
}

TEST_CASE("gelu: the exact and tanh forms differ and each matches its formula",
          "[elementwise][ops]") {
  Tensor x = from_vector<double>({-3.0, -1.0, 0.5, 1.0, 2.0});
  std::vector<double> exact, approx;
  for (double v : x.to_vector<double>()) {
    exact.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
    approx.push_back(0.5 * v * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v))));
  }
  check_values<double>(gelu(x), exact, "gelu");
  check_values<double>(gelu(x, GeluApproximation::tanh), approx, "gelu tanh");
  // gelu(1) = Phi(1) = 0.841344746...; the tanh approximation gives 0.841191990...
  CHECK(gelu(x).to_vector<double>()[3] == Approx(0.8413447460685429).epsilon(1e-14));
  CHECK(gelu(x, GeluApproximation::tanh).to_vector<double>()[3] ==
        Approx(0.8411919906082768).epsilon(1e-14));
}

TEST_CASE("sigmoid, silu and gelu give no NaN or overflow at large |x|", "[elementwise][ops]") {
  Tensor x = from_vector<float>({-1e30f, -500.f, -90.f, 90.f, 500.f, 1e30f});
  for (const Tensor& y : {sigmoid(x), silu(x), gelu(x), gelu(x, GeluApproximation::tanh)}) {
    for (float v : y.to_vector<float>()) CHECK(std::isfinite(v));
  }
  std::vector<float> sg = sigmoid(x).to_vector<float>();
  CHECK(sg[0] == 0.f);
  CHECK(sg[1] == 0.f);
  CHECK(sg[3] == 1.f);
  CHECK(sg[5] == 1.f);
  // sigmoid(-90) ~ 8.19e-40 is a float subnormal: kept, not flushed to 0.
  CHECK(sg[2] == Approx(8.194012623990515e-40).epsilon(1e-3));
  CHECK(silu(x).to_vector<float>()[5] == 1e30f);
  CHECK(gelu(x).to_vector<float>()[0] == 0.f);
}

TEST_CASE("binary ops broadcast (4,1,3) with (5,1) to (4,5,3)", "[elementwise][ops]") {
  std::vector<double> av(12), bv(5);
  for (int i = 0; i < 12; ++i) av[i] = 0.25 * i + 0.5;
  for (int j = 0; j < 5; ++j) bv[j] = 0.5 * j - 1.25;
  Tensor a = from_vector(av, {4, 1, 3}), b = from_vector(bv, {5, 1});
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&, const Tensor&)> op;
    std::function<double(double, double)> ref;
  };
  const std::vector<Case> cases = {
      {"add", [](auto& x, auto& y) { return x + y; }, [](double x, double y) { return x + y; }},
      {"sub", [](auto& x, auto& y) { return x - y; }, [](double x, double y) { return x - y; }},
      {"mul", [](auto& x, auto& y) { return x * y; }, [](double x, double y) { return x * y; }},
      {"div", [](auto& x, auto& y) { return x / y; }, [](double x, double y) { return x / y; }},
      {"pow", [](auto& x, auto& y) { return pow(x, y); },
       [](double x, double y) { return std::pow(x, y); }},
      {"maximum", [](auto& x, auto& y) { return maximum(x, y); },
       [](double x, double y) { return x > y ? x : y; }},
      {"minimum", [](auto& x, auto& y) { return minimum(x, y); },
       [](double x, double y) { return x < y ? x : y; }},
      {"add alpha", [](auto& x, auto& y) { return add(x, y, 0.5); },
       [](double x, double y) { return x + 0.5 * y; }},
  };
  for (const Case& c : cases) {
    Tensor out = c.op(a, b);
    REQUIRE(out.sizes() == Shape{4, 5, 3});
    std::vector<double> ref;
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 5; ++j) {
        for (int k = 0; k < 3; ++k) ref.push_back(c.ref(av[i * 3 + k], bv[j]));
      }
    }
    check_values<double>(out, ref, c.name);
    // The same in bf16 (inputs are exact in bf16), rounded once.
    check_values<bf16>(c.op(cast(a, DType::bf16), cast(b, DType::bf16)), ref,
                       std::string(c.name) + " bf16");
  }
}

TEST_CASE("0-d tensors and size-0 dims broadcast", "[elementwise][ops]") {
  Tensor s = from_vector<float>({2.5f}, {});
  REQUIRE(s.dim() == 0);
  Tensor v = from_vector<float>({1.f, -2.f, 4.f});
  CHECK((s * v).to_vector<float>() == std::vector<float>{2.5f, -5.f, 10.f});
  CHECK((v - s).to_vector<float>() == std::vector<float>{-1.5f, -4.5f, 1.5f});
  Tensor ss = s + s;
  CHECK(ss.dim() == 0);
  CHECK(ss.item<float>() == 5.f);

  Tensor e = zeros({0, 3});
  CHECK((e + v).sizes() == Shape{0, 3});
  CHECK(exp(e).sizes() == Shape{0, 3});
  CHECK(lt(e, v).sizes() == Shape{0, 3});
  CHECK(mul(zeros({2, 0}), from_vector<float>({3.f})).sizes() == Shape{2, 0});
  CHECK(where(zeros({2, 1, 1}, {.dtype = DType::u8}), e, s).sizes() == Shape{2, 0, 3});
  CHECK_THROWS_WITH(zeros({0}) + zeros({2}),
                    Catch::Contains("add") && Catch::Contains("[0]") && Catch::Contains("[2]"));
}

TEST_CASE("a transposed slice of a reshaped tensor is read through its strides",
          "[elementwise][ops]") {
  Tensor base = arange(24, {.dtype = DType::f64}).reshape({4, 6});
  Tensor x = base.slice(1, 1, 6, 2).t();  // [3, 4]: x[i][j] = base[j][1 + 2i] = 6j + 1 + 2i
  REQUIRE(x.sizes() == Shape{3, 4});
  REQUIRE_FALSE(x.is_contiguous());
  Tensor y = arange(12, {.dtype = DType::f64}).reshape({3, 4});
  std::vector<double> sum, prod;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) {
      double xv = 6.0 * j + 1 + 2 * i, yv = 4.0 * i + j;
      sum.push_back(xv + yv);
      prod.push_back(xv * yv * xv);
    }
  }
  check_values<double>(x + y, sum, "x + y");
  check_values<double>(y * x * x, prod, "y * x * x");
  // base is untouched (no op wrote through the view).
  CHECK(base.to_vector<double>()[7] == 7.0);
}

TEST_CASE("expanded operands are read without copies", "[elementwise][ops]") {
  Tensor col = from_vector<int64_t>({1, 2, 3}, {3, 1}).expand({3, 4});
  Tensor row = from_vector<int64_t>({10, 20, 30, 40}).expand({3, 4});
  CHECK(col.stride(1) == 0);
  CHECK((col * row).to_vector<int64_t>() ==
        std::vector<int64_t>{10, 20, 30, 40, 20, 40, 60, 80, 30, 60, 90, 120});
  CHECK(maximum(col, from_vector<int64_t>({2})).to_vector<int64_t>() ==
        std::vector<int64_t>{2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3});
}

TEST_CASE("mismatched shapes, dtypes and devices are errors naming the op", "[elementwise][ops]") {
  Tensor a = zeros({2, 3}), b = zeros({4});
  CHECK_THROWS_WITH(add(a, b),
                    Catch::Contains("add") && Catch::Contains("[2, 3]") && Catch::Contains("[4]"));
  CHECK_THROWS_WITH(eq(a, b), Catch::Contains("eq") && Catch::Contains("[2, 3]"));
  Tensor d = zeros({2, 3}, {.dtype = DType::f64});
  CHECK_THROWS_WITH(mul(a, d),
                    Catch::Contains("mul") && Catch::Contains("f32") && Catch::Contains("f64"));
  CHECK_THROWS_WITH(where(ones({2, 3}, {.dtype = DType::u8}), a, d),
                    Catch::Contains("where") && Catch::Contains("f64"));
  CHECK_THROWS_WITH(where(a, a, a), Catch::Contains("where") && Catch::Contains("u8"));
  // CUDA tensors cannot exist in this build, so the device check is shown with meta vs cpu.
  Tensor m = empty({2, 3}, {.device = Device::meta()});
  CHECK_THROWS_WITH(sub(a, m), Catch::Contains("sub") && Catch::Contains("meta"));
  CHECK_THROWS_WITH(exp(zeros({2}, {.dtype = DType::i64})),
                    Catch::Contains("exp") && Catch::Contains("i64"));
  CHECK_THROWS_WITH(add(zeros({2}, {.dtype = DType::i64}), zeros({2}, {.dtype = DType::i64}), 0.5),
                    Catch::Contains("alpha"));
}

TEST_CASE("integer ops: truncating division, division by zero and negative powers are errors",
          "[elementwise][ops]") {
  Tensor a = from_vector<int64_t>({-7, 7, 9, -9});
  Tensor b = from_vector<int64_t>({2, -2, 4, 4});
  CHECK((a / b).to_vector<int64_t>() == std::vector<int64_t>{-3, -3, 2, -2});
  CHECK(div(a, 3).to_vector<int64_t>() == std::vector<int64_t>{-2, 2, 3, -3});
  CHECK(pow(b, 3).to_vector<int64_t>() == std::vector<int64_t>{8, -8, 64, 64});
  CHECK((-a).to_vector<int64_t>() == std::vector<int64_t>{7, -7, -9, 9});
  CHECK(abs(a).to_vector<int64_t>() == std::vector<int64_t>{7, 7, 9, 9});
  CHECK(relu(a).to_vector<int64_t>() == std::vector<int64_t>{0, 7, 9, 0});

  Tensor z = from_vector<int64_t>({1, 0, 2, 3});
  CHECK_THROWS_WITH(a / z, Catch::Contains("div") && Catch::Contains("division by zero"));
  CHECK_THROWS_WITH(div(a, 0), Catch::Contains("division by zero"));
  CHECK_THROWS_WITH(div(5, z), Catch::Contains("division by zero"));
  Tensor self = a.clone();
  CHECK_THROWS_WITH(div_(self, z), Catch::Contains("div_") && Catch::Contains("division by zero"));
  CHECK(self.to_vector<int64_t>() == a.to_vector<int64_t>());  // left untouched
  CHECK_THROWS_WITH(pow(a, -1), Catch::Contains("pow") && Catch::Contains("negative"));
  // Floating division by zero is IEEE, not an error.
  Tensor f = from_vector<float>({1.f, -1.f, 0.f}) / 0.f;
  CHECK(f.to_vector<float>()[0] == std::numeric_limits<float>::infinity());
  CHECK(f.to_vector<float>()[1] == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(f.to_vector<float>()[2]));
  // u8 pow never has negative exponents; i32 wraps.
  CHECK(pow(from_vector<uint8_t>({2, 3}), 2).to_vector<uint8_t>() == std::vector<uint8_t>{4, 9});
  CHECK((from_vector<int32_t>({std::numeric_limits<int32_t>::max()}) + 1).item<int32_t>() ==
        std::numeric_limits<int32_t>::min());
}

TEST_CASE("a Scalar operand is converted to the tensor's dtype", "[elementwise][ops]") {
  Tensor i = from_vector<int64_t>({1, 2});
  CHECK((i + 2.7).to_vector<int64_t>() == std::vector<int64_t>{3, 4});  // 2.7 -> 2
  CHECK((10 - i).to_vector<int64_t>() == std::vector<int64_t>{9, 8});
  CHECK((from_vector<uint8_t>({5, 0}) + (-1)).to_vector<uint8_t>() == std::vector<uint8_t>{4, 255});
  Tensor h = from_vector<bf16>({bf16(1.0f)});
  // 0.1 becomes bf16(0.1) = 0.10009765625 before the multiply.
  CHECK(static_cast<float>((h * 0.1).item<bf16>()) == static_cast<float>(bf16(0.1f)));
  CHECK((2.0 * from_vector<double>({1.5})).item<double>() == 3.0);
  CHECK((1.0 / from_vector<double>({4.0})).item<double>() == 0.25);
  CHECK(pow(2.0, from_vector<double>({0.5})).item<double>() == Approx(std::sqrt(2.0)));
  CHECK(minimum(from_vector<float>({-1.f, 3.f}), 0).to_vector<float>() ==
        std::vector<float>{-1.f, 0.f});
}

TEST_CASE("comparisons produce u8 tensors of 0 and 1", "[elementwise][ops]") {
  Tensor a = from_vector<float>({1.f, 2.f, 3.f}, {3, 1});
  Tensor b = from_vector<float>({2.f, 3.f});
  Tensor g = gt(a, b);
  CHECK(g.dtype() == DType::u8);
  CHECK(g.sizes() == Shape{3, 2});
  CHECK(g.to_vector<uint8_t>() == std::vector<uint8_t>{0, 0, 0, 0, 1, 0});
  CHECK(ge(a, b).to_vector<uint8_t>() == std::vector<uint8_t>{0, 0, 1, 0, 1, 1});
  CHECK(lt(a, b).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1, 0, 1, 0, 0});
  CHECK(le(a, b).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1, 1, 1, 0, 1});
  CHECK(eq(a, b).to_vector<uint8_t>() == std::vector<uint8_t>{0, 0, 1, 0, 0, 1});
  CHECK(ne(a, b).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1, 0, 1, 1, 0});
  CHECK(eq(a, 2).to_vector<uint8_t>() == std::vector<uint8_t>{0, 1, 0});
  CHECK(ne(a, 2).to_vector<uint8_t>() == std::vector<uint8_t>{1, 0, 1});
  CHECK(lt(a, 2.5).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1, 0});
  CHECK(le(a, 2).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1, 0});
  CHECK(gt(a, 1).to_vector<uint8_t>() == std::vector<uint8_t>{0, 1, 1});
  CHECK(ge(a, 3).to_vector<uint8_t>() == std::vector<uint8_t>{0, 0, 1});
  CHECK(eq(from_vector<int64_t>({5, 6}), 6).to_vector<uint8_t>() == std::vector<uint8_t>{0, 1});
}

TEST_CASE("where broadcasts cond, a and b together", "[elementwise][ops]") {
  Tensor x = from_vector<float>({-1.f, 2.f, -3.f}, {3, 1});
  Tensor a = from_vector<float>({10.f, 20.f});
  Tensor zero = from_vector<float>({0.f}, {});
  Tensor w = where(gt(x, 0), a, zero);
  CHECK(w.sizes() == Shape{3, 2});
  CHECK(w.to_vector<float>() == std::vector<float>{0.f, 0.f, 10.f, 20.f, 0.f, 0.f});
  // relu written with where equals relu.
  Tensor y = transposed_grid<float>(5, 7, -2, 2);
  CHECK(where(gt(y, 0), y, zero).to_vector<float>() == relu(y).to_vector<float>());
}

TEST_CASE("in-place ops write into self and keep its shape", "[elementwise][ops]") {
  Tensor x = from_vector<float>({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  Tensor row = from_vector<float>({10.f, 20.f, 30.f});
  const Tensor& r = add_(x, row, 0.5);
  CHECK(r.is_same(x));
  CHECK(x.to_vector<float>() == std::vector<float>{6.f, 12.f, 18.f, 9.f, 15.f, 21.f});
  sub_(x, 1);
  mul_(x, from_vector<float>({2.f}, {}));
  div_(x, 4);
  CHECK(x.to_vector<float>() == std::vector<float>{2.5f, 5.5f, 8.5f, 4.f, 7.f, 10.f});
  sub_(x, row);
  mul_(x, 2);
  add_(x, 1);
  div_(x, from_vector<float>({2.f, 4.f}, {2, 1}));
  CHECK(x.to_vector<float>() ==
        std::vector<float>{-14.f / 2, -28.f / 2, -42.f / 2, -11.f / 4, -25.f / 4, -39.f / 4});

  // Writing through a non-contiguous view changes only the viewed elements.
  Tensor base = zeros({3, 4});
  add_(base.t().narrow(0, 1, 2), 1);  // columns 1 and 2
  CHECK(base.to_vector<float>() == std::vector<float>{0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0});

  CHECK_THROWS_WITH(add_(row, x),
                    Catch::Contains("add_") && Catch::Contains("[3]") && Catch::Contains("[2, 3]"));
  CHECK_THROWS_WITH(mul_(zeros({3}).expand({2, 3}), 2),
                    Catch::Contains("mul_") && Catch::Contains("expanded"));
}

TEST_CASE("in-place ops read an overlapping other as it was before the write",
          "[elementwise][ops]") {
  Tensor x = arange(6, {.dtype = DType::f32});
  // x[1:] += x[:5]: each element must add the old value of its left neighbour.
  add_(x.narrow(0, 1, 5), x.narrow(0, 0, 5));
  CHECK(x.to_vector<float>() == std::vector<float>{0, 1, 3, 5, 7, 9});
  Tensor y = arange(6, {.dtype = DType::f32}).reshape({2, 3});
  mul_(y, y);  // the exact same view is safe to read in place
  CHECK(y.to_vector<float>() == std::vector<float>{0, 1, 4, 9, 16, 25});
  Tensor m = arange(4, {.dtype = DType::f64}).reshape({2, 2});
  sub_(m, m.t());  // m - m^T from the original m
  CHECK(m.to_vector<double>() == std::vector<double>{0, -1, 1, 0});
  Tensor v = arange(4, {.dtype = DType::i64});
  add_(v, v.narrow(0, 3, 1));  // broadcast of the last element, which is itself written
  CHECK(v.to_vector<int64_t>() == std::vector<int64_t>{3, 4, 5, 6});
}

TEST_CASE("meta tensors give meta results of the broadcast shape", "[elementwise][ops]") {
  const TensorOptions meta{.device = Device::meta()};
  Tensor a = empty({4, 1, 3}, meta), b = empty({5, 1}, meta);
  Tensor s = a + b;
  CHECK(s.device().is_meta());
  CHECK(s.sizes() == Shape{4, 5, 3});
  Tensor c = lt(a, b);
  CHECK(c.device().is_meta());
  CHECK(c.dtype() == DType::u8);
  CHECK(gelu(a).sizes() == Shape{4, 1, 3});
  CHECK(where(c, a, b).sizes() == Shape{4, 5, 3});
  CHECK(add(a, 2.0).device().is_meta());
  Tensor self = empty({4, 5, 3}, meta);
  CHECK(add_(self, b, 2).is_same(self));
  CHECK_THROWS_WITH(add_(a, b), Catch::Contains("add_"));
  CHECK_THROWS_WITH(exp(empty({2}, {.dtype = DType::i32, .device = Device::meta()})),
                    Catch::Contains("exp") && Catch::Contains("i32"));
}

TEST_CASE("cast converts like to(dtype)", "[elementwise][ops]") {
  Tensor i = from_vector<int64_t>({-2, 3});
  Tensor f = cast(i, DType::f32);
  CHECK(f.dtype() == DType::f32);
  CHECK(f.to_vector<float>() == std::vector<float>{-2.f, 3.f});
  CHECK(cast(from_vector<double>({2.75}), DType::i32).item<int32_t>() == 2);
  CHECK(cast(f, DType::f32).is_same(f));
}

TEST_CASE("ops on 300k-element tensors use the threaded path and match the reference",
          "[elementwise][ops]") {
  // A transposed [600, 500] activation plus a broadcast bias, then gelu and a comparison.
  // Inputs stay within [-4, 4], where the textbook double reference keeps its digits.
  Tensor x = transposed_grid<float>(500, 600, -3, 3);  // [600, 500], not contiguous
  std::vector<float> bias_v(500);
  for (int j = 0; j < 500; ++j) bias_v[j] = 0.004f * static_cast<float>(j - 250);
  Tensor bias = from_vector(bias_v);
  Tensor y = gelu(x + bias, GeluApproximation::tanh);
  Tensor mask = gt(x, bias);
  std::vector<float> xv = x.to_vector<float>();
  std::vector<double> ref(xv.size());
  std::vector<uint8_t> mask_ref(xv.size());
  for (size_t k = 0; k < xv.size(); ++k) {
    float s = xv[k] + bias_v[k % 500];  // the f32 sum the op rounds to before gelu
    double v = s;
    ref[k] = 0.5 * v * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
    mask_ref[k] = xv[k] > bias_v[k % 500] ? 1 : 0;
  }
  check_values<float>(y, ref, "gelu(x + bias) 300k");
  CHECK(mask.to_vector<uint8_t>() == mask_ref);
}
