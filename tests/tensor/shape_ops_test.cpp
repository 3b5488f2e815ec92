// cat, stack and split (dtr/tensor/ops/shape_ops.h): layouts against index loops
// written here, non-contiguous operands, meta shapes, gradcheck of every
// operand and of each split piece, and every error message.
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/reduce.h"
#include "dtr/tensor/ops/shape_ops.h"
#include "dtr/tensor/random.h"
#include "tests/support/gradcheck.h"
#include "tests/support/values.h"

#include <catch2/catch.hpp>

#include <vector>

using namespace dtr;
using dtr::testing::values_of;

namespace {

Tensor seq(const Shape& shape, double start, DType dtype = DType::f32) {
  return (arange(numel_of(shape), {.dtype = DType::f64}) + start).to(dtype).reshape(shape);
}

}  // namespace

TEST_CASE("cat along each dim places every operand at its offset", "[shape]") {
  Tensor a = seq({2, 3, 4}, 0);
  Tensor b = seq({2, 3, 4}, 100);
  for (int64_t dim = 0; dim < 3; ++dim) {
    CAPTURE(dim);
    Shape bs = {2, 3, 4};
    bs[dim] = 2;
    // A non-contiguous operand: a box inside a larger tensor.
    Tensor b2 = seq({4, 5, 6}, 100).narrow(0, 1, bs[0]).narrow(1, 1, bs[1]).narrow(2, 1, bs[2]);
    Tensor c = cat({a, b2}, dim);
    Shape want = {2, 3, 4};
    want[dim] = a.size(dim) + 2;
    REQUIRE(c.sizes() == want);
    const std::vector<double> av = values_of(a), bv = values_of(b2), cv = values_of(c);
    for (int64_t i = 0; i < want[0]; ++i) {
      for (int64_t j = 0; j < want[1]; ++j) {
        for (int64_t k = 0; k < want[2]; ++k) {
          int64_t idx[3] = {i, j, k};
          const double got = cv[(i * want[1] + j) * want[2] + k];
          if (idx[dim] < a.size(dim)) {
            CHECK(got == av[(i * 3 + j) * 4 + k]);
            continue;
          }
          idx[dim] -= a.size(dim);
          CHECK(got == bv[(idx[0] * bs[1] + idx[1]) * bs[2] + idx[2]]);
        }
      }
    }
  }
  CHECK(cat({a, b}, -1).sizes() == Shape{2, 3, 8});
  CHECK(cat({a}, 1).sizes() == a.sizes());
  CHECK(cat({a, zeros({2, 0, 4})}, 1).sizes() == a.sizes());
  CHECK(cat({a, b}, 0).device().is_cpu());
  Tensor m = cat({empty({2, 3}, {.device = Device::meta()}), empty({2, 5}, {.device = Device::meta()})}, 1);
  CHECK(m.device().is_meta());
  CHECK(m.sizes() == Shape{2, 8});
}

TEST_CASE("stack inserts a new dim and keeps integer dtypes", "[shape]") {
  Tensor a = seq({2, 3}, 0, DType::i64);
  Tensor b = seq({2, 3}, 10, DType::i64);
  Tensor s0 = stack({a, b}, 0);
  Tensor s1 = stack({a, b}, 1);
  Tensor s2 = stack({a, b}, -1);
  REQUIRE(s0.sizes() == Shape{2, 2, 3});
  REQUIRE(s1.sizes() == Shape{2, 2, 3});
  REQUIRE(s2.sizes() == Shape{2, 3, 2});
  CHECK(s0.dtype() == DType::i64);
  const std::vector<double> v0 = values_of(s0), v1 = values_of(s1), v2 = values_of(s2);
  for (int64_t n = 0; n < 2; ++n) {
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < 3; ++j) {
        const double want = (n == 0 ? 0 : 10) + i * 3 + j;
        CHECK(v0[(n * 2 + i) * 3 + j] == want);
        CHECK(v1[(i * 2 + n) * 3 + j] == want);
        CHECK(v2[(i * 3 + j) * 2 + n] == want);
      }
    }
  }
  CHECK(stack({scalar_tensor(1.0, DType::f32), scalar_tensor(2.0, DType::f32)}).sizes() == Shape{2});
}

TEST_CASE("split returns views with a shorter last piece", "[shape]") {
  Tensor t = seq({5, 3}, 0);
  std::vector<Tensor> p = split(t, 2, 0);
  REQUIRE(p.size() == 3);
  CHECK(p[0].sizes() == Shape{2, 3});
  CHECK(p[2].sizes() == Shape{1, 3});
  CHECK(values_of(p[2]) == std::vector<double>{12, 13, 14});
  CHECK(p[1].storage_offset() == 6);  // a view of t
  std::vector<Tensor> q = split(t, 2, -1);
  REQUIRE(q.size() == 2);
  CHECK(values_of(q[1]) == std::vector<double>{2, 5, 8, 11, 14});
  CHECK(split(t, 7, 0).size() == 1);
  CHECK(split(zeros({0, 3}), 2, 0).size() == 1);
  CHECK(values_of(cat(split(t, 2, 1), 1)) == values_of(t));
}

TEST_CASE("gradcheck of cat, stack and split for every operand and piece", "[shape]") {
  Generator gen(7);
  auto opt = TensorOptions{.dtype = DType::f64};
  Tensor a = randn({2, 3}, opt, &gen).requires_grad_();
  Tensor b = randn({2, 2}, opt, &gen).requires_grad_();
  Tensor c = randn({2, 3}, opt, &gen).requires_grad_();
  Tensor frozen = randn({2, 1}, opt, &gen);
  CHECK(testing::gradcheck([&](const std::vector<Tensor>& in) { return cat({in[0], frozen, in[1]}, 1); },
                           {a, b}) == "");
  CHECK(testing::gradcheck([](const std::vector<Tensor>& in) { return stack({in[0], in[1]}, 1); },
                           {a, c}) == "");
  CHECK(testing::gradcheck(
            [](const std::vector<Tensor>& in) {
              std::vector<Tensor> p = split(in[0], 2, 1);
              return p[0] * 2.0 + sum(p[1] * p[1]);  // uses every piece differently
            },
            {randn({3, 4}, opt, &gen).requires_grad_()}) == "");
  CHECK(testing::gradcheck(
            [](const std::vector<Tensor>& in) { return exp(split(in[0], 2, 0).back()); },
            {randn({5, 2}, opt, &gen).requires_grad_()}) == "");
}

TEST_CASE("cat, stack and split reject bad input with clear errors", "[shape]") {
  Tensor a = zeros({2, 3});
  CHECK_THROWS_WITH(cat({}, 0), Catch::Contains("cat: expected a non-empty list of tensors"));
  CHECK_THROWS_WITH(stack({}, 0), Catch::Contains("stack: expected a non-empty list of tensors"));
  CHECK_THROWS_WITH(cat({a, Tensor()}, 0), Catch::Contains("cat: tensor 1 is undefined"));
  CHECK_THROWS_WITH(cat({a, zeros({2, 4})}, 0),
                    Catch::Contains("cat: tensor 1 has shape [2, 4], but tensor 0 has shape [2, 3]"));
  CHECK_THROWS_WITH(cat({a, zeros({2, 3}, {.dtype = DType::f64})}, 0),
                    Catch::Contains("cat: tensor 1 has dtype f64, but tensor 0 has dtype f32"));
  CHECK_THROWS_WITH(cat({a, zeros({2, 3}, {.device = Device::meta()})}, 0),
                    Catch::Contains("cat: tensor 1 is on meta, but tensor 0 is on cpu"));
  CHECK_THROWS_WITH(cat({a, zeros({6})}, 0), Catch::Contains("cat: tensor 1 has 1 dims"));
  CHECK_THROWS_WITH(cat({a, a}, 2), Catch::Contains("cat: dim 2 is out of range"));
  CHECK_THROWS_WITH(cat({zeros({}), zeros({})}, 0), Catch::Contains("cat: cannot concatenate 0-d"));
  CHECK_THROWS_WITH(stack({a, zeros({3, 2})}, 0),
                    Catch::Contains("stack: tensor 1 has shape [3, 2], but tensor 0 has shape [2, 3]"));
  CHECK_THROWS_WITH(stack({a, a}, 3), Catch::Contains("stack: dim 3 is out of range for 2-D tensors"));
  CHECK_THROWS_WITH(split(a, 0, 0), Catch::Contains("split: split_size must be positive, got 0"));
  CHECK_THROWS_WITH(split(a, 1, -3), Catch::Contains("split: dim -3 is out of range"));
  CHECK_THROWS_WITH(split(zeros({}), 1, 0), Catch::Contains("split: cannot split a 0-d tensor"));
}
