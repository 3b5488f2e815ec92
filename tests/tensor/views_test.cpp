// Views share storage and read the right elements; copies do not alias.
// Expected values are computed by hand from row-major index arithmetic.
#include "dtr/tensor/factory.h"
#include "tests/support/values.h"

#include <catch2/catch.hpp>

using namespace dtr;
using dtr::testing::iota;  // 0, 1, 2, ... as f32 in the given shape

TEST_CASE("view and reshape keep row-major order and share storage", "[views]") {
  Tensor a = iota({2, 3, 4});
  Tensor v = a.view({6, 4});
  CHECK(v.sizes() == Shape{6, 4});
  CHECK(v.storage().is_same(a.storage()));
  CHECK(v.to_vector<float>() == a.to_vector<float>());
  CHECK(a.view({-1, 2}).sizes() == Shape{12, 2});
  CHECK_THROWS_WITH(a.view({5, -1}), Catch::Contains("invalid for a tensor of shape [2, 3, 4]"));
  CHECK_THROWS_WITH(a.view({-1, -1}), Catch::Contains("only one dim can be -1"));
  // A transposed tensor cannot be flattened by view, but reshape copies.
  Tensor t = a.transpose(0, 2);  // [4, 3, 2]
  CHECK_THROWS_WITH(t.view({24}), Catch::Contains("use reshape()"));
  Tensor r = t.reshape({24});
  CHECK_FALSE(r.storage().is_same(a.storage()));
  std::vector<float> expected;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) expected.push_back(static_cast<float>(i * 12 + j * 4 + k));
  CHECK(r.to_vector<float>() == expected);
  // Viewable without a copy: splitting a dim of a transposed tensor.
  Tensor s = t.reshape({2, 2, 3, 2});
  CHECK(s.storage().is_same(a.storage()));
}

TEST_CASE("a transposed slice of a reshaped tensor reads the right elements", "[views]") {
  Tensor base = iota({24});
  Tensor m = base.reshape({4, 6});        // m[i][j] = 6i + j
  Tensor s = m.slice(1, 1, 6, 2);         // columns 1, 3, 5 -> [4, 3]
  Tensor ts = s.transpose(0, 1);          // [3, 4]: ts[c][i] = 6i + (1 + 2c)
  Tensor n = ts.narrow(1, 1, 2);          // rows i = 1, 2
  REQUIRE(n.sizes() == Shape{3, 2});
  CHECK_FALSE(n.is_contiguous());
  CHECK(n.storage().is_same(base.storage()));
  std::vector<float> expected;
  for (int c = 0; c < 3; ++c)
    for (int i = 1; i <= 2; ++i) expected.push_back(static_cast<float>(6 * i + 1 + 2 * c));
  CHECK(n.to_vector<float>() == expected);
  CHECK(n.contiguous().is_contiguous());
  CHECK(n.contiguous().to_vector<float>() == expected);
  // Writing through a view changes the base.
  n.fill_(-1);
  CHECK(base.to_vector<float>()[6 * 1 + 1] == -1);
  CHECK(base.to_vector<float>()[6 * 2 + 5] == -1);
  CHECK(base.to_vector<float>()[6 * 0 + 1] == 1);
}

TEST_CASE("select, permute, expand, squeeze and unsqueeze", "[views]") {
  Tensor a = iota({2, 3, 4});
  CHECK(a.select(1, 2).to_vector<float>() == std::vector<float>{8, 9, 10, 11, 20, 21, 22, 23});
  CHECK(a.select(-1, -1).to_vector<float>() == std::vector<float>{3, 7, 11, 15, 19, 23});
  Tensor p = a.permute({2, 0, 1});
  CHECK(p.sizes() == Shape{4, 2, 3});
  CHECK(p.select(0, 1).select(0, 1).to_vector<float>() == std::vector<float>{13, 17, 21});
  CHECK_THROWS_WITH(a.permute({0, 0, 1}), Catch::Contains("appears twice"));
  CHECK_THROWS_WITH(a.select(3, 0), Catch::Contains("dim 3 is out of range for a 3-d tensor"));

  Tensor col = iota({3, 1});
  Tensor e = col.expand({2, 3, 4});
  CHECK(e.stride(0) == 0);
  CHECK(e.stride(2) == 0);
  CHECK(e.select(0, 1).select(0, 2).to_vector<float>() == std::vector<float>{2, 2, 2, 2});
  CHECK_THROWS_WITH(iota({3, 2}).expand({3, 4}), Catch::Contains("cannot be expanded to [3, 4]"));

  Tensor u = iota({3}).unsqueeze(0).unsqueeze(-1);
  CHECK(u.sizes() == Shape{1, 3, 1});
  CHECK(u.squeeze(2).squeeze(0).sizes() == Shape{3});
  CHECK_THROWS_WITH(u.squeeze(1), Catch::Contains("has size 3, not 1"));
  CHECK(a.flatten(1).sizes() == Shape{2, 12});
}

TEST_CASE("slice clamps like Python and steps", "[views]") {
  Tensor a = iota({10});
  CHECK(a.slice(0, 2, 9, 3).to_vector<float>() == std::vector<float>{2, 5, 8});
  CHECK(a.slice(0, -3, 100).to_vector<float>() == std::vector<float>{7, 8, 9});
  CHECK(a.slice(0, 5, 2).numel() == 0);
  CHECK_THROWS_WITH(a.narrow(0, 8, 3), Catch::Contains("[8, 11) is out of range"));
}

TEST_CASE("copy_ broadcasts and converts, and clone does not alias", "[views]") {
  Tensor dst = zeros({2, 3}, {.dtype = DType::f64});
  dst.copy_(from_vector<int32_t>({1, 2, 3}));
  CHECK(dst.to_vector<double>() == std::vector<double>{1, 2, 3, 1, 2, 3});
  Tensor c = dst.clone();
  c.fill_(7);
  CHECK(dst.to_vector<double>()[0] == 1);
  // Overlapping self-copy (shift by one) reads the original values.
  Tensor x = iota({5});
  x.narrow(0, 1, 4).copy_(x.narrow(0, 0, 4));
  CHECK(x.to_vector<float>() == std::vector<float>{0, 0, 1, 2, 3});
  CHECK_THROWS_WITH(zeros({2, 3}).copy_(zeros({4})), Catch::Contains("cannot be expanded"));
}

TEST_CASE("factories, item and to_string", "[views]") {
  CHECK(arange(1, 2, 0.25).to_vector<float>() == std::vector<float>{1, 1.25, 1.5, 1.75});
  CHECK(arange(5, {.dtype = DType::i64}).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK_THROWS_WITH(arange(0, 5, -1), Catch::Contains("does not lead from start"));
  CHECK(full({1}, 3.5, {.dtype = DType::bf16}).item<bf16>() == bf16(3.5f));
  CHECK(scalar_tensor(int64_t{1} << 60, DType::i64).item<int64_t>() == (int64_t{1} << 60));
  CHECK(ones({1, 1}).item() == 1.0);
  CHECK_THROWS_WITH(ones({2}).item(), Catch::Contains("expected a tensor with one element"));
  CHECK_THROWS_WITH(ones({2}).to_vector<double>(), Catch::Contains("to_vector<f64>() on a tensor of dtype f32"));
  CHECK(from_vector<float>({1, 2, 3, 4}, {2, 2}).to_string() ==
        "tensor([[1, 2],\n        [3, 4]], dtype=f32, device=cpu)");
  CHECK(from_vector<int64_t>({7}, {}).to_string() == "tensor(7, dtype=i64, device=cpu)");
  CHECK_THROWS_WITH(from_vector<float>({1, 2, 3}, {2, 2}), Catch::Contains("3 values do not fill shape [2, 2]"));
}
