// embedding (dtr/tensor/ops/nn.h): gathered rows by hand, any index shape,
// non-contiguous tables, gradcheck of the table, a scatter-add backward with
// repeated indices that is bitwise the same for 1 and 2 threads and matches a
// double loop, a table tied to an output layer against two untied copies, meta
// inputs, and error messages.
#include "dtr/kernels/cpu/parallel.h"
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/matmul.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/random.h"
#include "tests/support/gradcheck.h"
#include "tests/support/values.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

using namespace dtr;
using dtr::testing::iota;
using dtr::testing::ThreadCount;

TEST_CASE("embedding gathers rows for indices of any shape", "[nn]") {
  Tensor table = iota({5, 3}, DType::f32);  // row r is [3r, 3r+1, 3r+2]
  Tensor idx = from_vector<int64_t>({4, 0, 4, 2}, {2, 2});
  Tensor out = embedding(table, idx);
  CHECK(out.sizes() == Shape{2, 2, 3});
  CHECK(out.to_vector<float>() == std::vector<float>{12, 13, 14, 0, 1, 2, 12, 13, 14, 6, 7, 8});
  CHECK(embedding(table, scalar_tensor(1, DType::i64)).to_vector<float>() == std::vector<float>{3, 4, 5});
  CHECK(embedding(table, from_vector<int64_t>({})).sizes() == Shape{0, 3});
  // Non-contiguous table and indices, integer and bf16 tables.
  Tensor strided = iota({3, 5}, DType::f64).t();  // [5, 3], row r is [r, r+5, r+10]
  Tensor every_other = from_vector<int64_t>({1, 9, 3, 9}).slice(0, 0, 4, 2);  // [1, 3]
  CHECK(embedding(strided, every_other).to_vector<double>() == std::vector<double>{1, 6, 11, 3, 8, 13});
  CHECK(embedding(iota({5, 3}, DType::i32), from_vector<int64_t>({2})).to_vector<int32_t>() ==
        std::vector<int32_t>{6, 7, 8});
  CHECK(embedding(iota({5, 3}, DType::bf16), from_vector<int64_t>({3})).to(DType::f32).to_vector<float>() ==
        std::vector<float>{9, 10, 11});
}

TEST_CASE("gradcheck of embedding for the table, with repeated and strided indices", "[nn]") {
  Generator gen(13);
  Tensor table = randn({6, 4}, {.dtype = DType::f64}, &gen).requires_grad_();
  Tensor idx = from_vector<int64_t>({5, 0, 5, 5, 2, 0}, {3, 2});
  CHECK(testing::gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], idx); }, {table}) == "");
  Tensor strided = randn({4, 6}, {.dtype = DType::f64}, &gen).t().detach().requires_grad_();
  Tensor idx_t = idx.t();
  CHECK(testing::gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], idx_t); }, {strided}) == "");
  // Rows nobody looked up get a zero gradient; repeated rows sum.
  Tensor t2 = zeros({3, 2}, {.dtype = DType::f64}).requires_grad_();
  embedding(t2, from_vector<int64_t>({2, 2, 0}))
      .backward(from_vector<double>({1, 2, 10, 20, 100, 200}, {3, 2}));
  CHECK(t2.grad().to_vector<double>() == std::vector<double>{100, 200, 0, 0, 11, 22});
}

TEST_CASE("embedding backward with repeated indices is bitwise the same for 1 and 2 threads", "[nn]") {
  // 6000 tokens over 40 rows (most rows hit ~150 times), 96 columns: enough work
  // to split across threads.
  const int64_t tokens = 6000, rows = 40, cols = 96;
  std::vector<int64_t> idx(tokens);
  for (int64_t t = 0; t < tokens; ++t) idx[t] = (t * 7 + t / 13) % (rows - 3);  // rows 37..39 unused
  Tensor indices = from_vector<int64_t>(idx, {60, 100});
  Generator gen(17);
  for (DType dtype : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(dtype));
    Tensor grad_out = randn({60, 100, cols}, {.dtype = dtype}, &gen);
    auto run = [&](int threads) {
      ThreadCount tc(threads);
      Tensor table = zeros({rows, cols}, {.dtype = dtype}).requires_grad_();
      embedding(table, indices).backward(grad_out);
      return table.grad().to(DType::f32).to_vector<float>();
    };
    const std::vector<float> one = run(1);
    CHECK(one == run(2));
    // Against a double loop: float accumulation of ~150 terms, one rounding to dtype.
    const std::vector<double> g = grad_out.to(DType::f64).to_vector<double>();
    std::vector<double> want(rows * cols, 0.0);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t c = 0; c < cols; ++c) want[idx[t] * cols + c] += g[t * cols + c];
    }
    const double tol = dtype == DType::bf16 ? 1e-2 : 1e-5;
    for (size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      CHECK(one[i] == Approx(want[i]).epsilon(tol).margin(tol));
    }
    for (int64_t c = 0; c < cols; ++c) CHECK(one[39 * cols + c] == 0.0f);
  }
}

TEST_CASE("a table tied to an output layer gets both gradients summed, the embedding's added in place",
          "[nn]") {
  // GPT-2's tying: the table embeds the tokens and is the output layer's weight. The
  // output layer's gradient reaches the table first; the embedding's rows are then
  // added into it (Node::accumulate_into) rather than a zero table around them.
  const int64_t vocab = 1000, dim = 64;
  Tensor indices = from_vector<int64_t>({3, 999, 3, 0, 512, 3, 7, 999}, {2, 4});
  Generator gen(23);
  for (DType dtype : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(dtype));
    const Tensor values = randn({vocab, dim}, {.dtype = dtype}, &gen);
    const Tensor upstream = randn({2, 4, vocab}, {.dtype = dtype}, &gen);
    // The independent reference: the same sums through two untied copies of the table,
    // whose gradients the add op then adds.
    Tensor embedded_copy = values.clone().requires_grad_(), output_copy = values.clone().requires_grad_();
    linear(embedding(embedded_copy, indices), output_copy).backward(upstream);
    const std::vector<float> want =
        (output_copy.grad() + embedded_copy.grad()).to(DType::f32).to_vector<float>();

    Tensor tied = values.clone().requires_grad_();
    Tensor logits = linear(embedding(tied, indices), tied);
    reset_peak_memory_stats(Device::cpu());
    const int64_t before = memory_stats(Device::cpu()).total.current_bytes;
    logits.backward(upstream);
    const int64_t peak = memory_stats(Device::cpu()).total.peak_bytes - before;
    CHECK(tied.grad().to(DType::f32).to_vector<float>() == want);
    // The backward's transients: the output layer's table-sized gradient (kept as
    // .grad) and small ones, but no second table of zeros and no third for the sum.
    const int64_t table_bytes = vocab * dim * static_cast<int64_t>(element_size(dtype));
    CHECK(peak < 2 * table_bytes);
  }
}

TEST_CASE("a tied table's gradient is right when the summed gradient is shared or comes second", "[nn]") {
  const int64_t vocab = 50, dim = 8;
  Tensor indices = from_vector<int64_t>({1, 49, 1, 20});
  Generator gen(29);
  const Tensor values = randn({vocab, dim}, {}, &gen);
  const Tensor upstream = randn({4, vocab}, {}, &gen);
  Tensor embedded_copy = values.clone().requires_grad_(), output_copy = values.clone().requires_grad_();
  linear(embedding(embedded_copy, indices), output_copy).backward(upstream);
  const std::vector<float> want = (output_copy.grad() + embedded_copy.grad()).to_vector<float>();
  SECTION("a post hook keeps the output layer's gradient: the sum is made out of place") {
    Tensor tied = values.clone().requires_grad_();
    Tensor logits = linear(embedding(tied, indices), tied);
    std::vector<Tensor> kept;
    logits.grad_fn()->add_post_hook(
        [&](const std::vector<Tensor>& grad_inputs, const std::vector<Tensor>&) { kept = grad_inputs; });
    logits.backward(upstream);
    CHECK(tied.grad().to_vector<float>() == want);
    // The kept gradient is still the output layer's alone, not the sum.
    CHECK(kept.back().to_vector<float>() == output_copy.grad().to_vector<float>());
  }
  SECTION("the embedding's backward runs first: there is no sum to add into yet") {
    // The output layer reads the table through an op created before the embedding,
    // so the embedding's backward runs before that op's.
    Tensor tied = values.clone().requires_grad_();
    Tensor through = tied * 1.0;
    linear(embedding(tied, indices), through).backward(upstream);
    CHECK(tied.grad().to_vector<float>() == want);
  }
}

TEST_CASE("embedding on meta gives meta outputs, and bad input gives clear errors", "[nn]") {
  Tensor meta_table = empty({10, 4}, {.device = Device::meta()});
  Tensor meta_idx = empty({2, 3}, {.dtype = DType::i64, .device = Device::meta()});
  Tensor out = embedding(meta_table, meta_idx);
  CHECK(out.device().is_meta());
  CHECK(out.sizes() == Shape{2, 3, 4});

  Tensor table = zeros({5, 3});
  CHECK_THROWS_WITH(embedding(table, from_vector<int64_t>({0, 1, 7})),
                    Catch::Contains("embedding: index 7 at position 2 (of indices with shape [3]) is out "
                                    "of range for a weight with 5 rows (expected 0 <= index < 5)"));
  CHECK_THROWS_WITH(embedding(table, from_vector<int64_t>({-1})),
                    Catch::Contains("embedding: index -1 at position 0"));
  CHECK_THROWS_WITH(embedding(table, from_vector<float>({1})),
                    Catch::Contains("embedding: indices must have dtype i64, got f32"));
  CHECK_THROWS_WITH(embedding(zeros({5}), from_vector<int64_t>({1})),
                    Catch::Contains("embedding: weight must be 2-D [num_embeddings, embedding_dim], got shape [5]"));
  CHECK_THROWS_WITH(embedding(table, meta_idx), Catch::Contains("embedding: expected all operands on cpu"));
}
