// CUDA embedding (dtr/tensor/ops/nn.h, dtr/kernels/cuda/embedding.h) against the CPU op
// on the same inputs: the forward gather for every dtype over vocab sizes
// {1, 2, 3, 255, 256, 1000, 50257}, embedding dims {1, 3, 64, 768} and token
// counts {1, 2, 7, 512, 4096} (every copy width: 16-, 8-, 4-, 2- and 1-byte
// units), non-contiguous and unaligned tables and indices; the backward (the
// table's gradient) with many repeated indices over the same sizes plus sizes
// that need 1, 2 and 3 radix-sort passes and many sort chunks; run-to-run
// determinism; out-of-range indices.
//
// Tolerance: none. The forward is a copy, and the CPU and CUDA backwards both
// sum each table row's gradients in token order in acc_t<T> (float for
// bf16/f16) starting from 0 and round once (dtr/kernels/cpu/embedding.cpp buckets
// tokens with a stable counting pass; the CUDA kernel uses a stable radix sort),
// so every dtype must match the CPU bit for bit. Inputs are fresh random values
// each run (the seed is printed on failure).
#include "tests/support/gpu_test_support.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/random.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace dtr;
using namespace dtr::testing::gpu;

namespace {

const std::vector<int64_t> kVocabs = {1, 2, 3, 255, 256, 1000, 50257};
const std::vector<int64_t> kDims = {1, 3, 64, 768};
const std::vector<int64_t> kTokens = {1, 2, 7, 512, 4096};

// i64 indices of `shape`: a fraction `hot` of them all the same row (vocab / 2),
// the rest uniform in [0, vocab).
Tensor random_indices(const Shape& shape, int64_t vocab, std::mt19937& rng, double hot = 0.0) {
  std::uniform_int_distribution<int64_t> any(0, vocab - 1);
  std::bernoulli_distribution is_hot(hot);
  std::vector<int64_t> v(static_cast<size_t>(numel_of(shape)));
  for (int64_t& x : v) x = is_hot(rng) ? vocab / 2 : any(rng);
  return from_vector(v, shape);
}

// "" when got and want have the same dtype, shape and bytes; otherwise what
// differs, with the first differing element (flat index, row and column of the
// last dim, both values).
std::string bit_difference(const Tensor& got, const Tensor& want) {
  std::ostringstream os;
  if (got.dtype() != want.dtype()) {
    os << "dtype " << name_of(got.dtype()) << " vs " << name_of(want.dtype());
    return os.str();
  }
  if (got.sizes() != want.sizes()) {
    os << "shape " << shape_str(got.sizes()) << " vs " << shape_str(want.sizes());
    return os.str();
  }
  const Tensor g = got.to(kCpu).contiguous(), w = want.to(kCpu).contiguous();
  const size_t es = element_size(g.dtype());
  const auto* gb = static_cast<const unsigned char*>(g.raw_data());
  const auto* wb = static_cast<const unsigned char*>(w.raw_data());
  if (g.numel() == 0 || std::memcmp(gb, wb, g.nbytes()) == 0) return "";
  int64_t count = 0, first = -1;
  for (int64_t i = 0; i < g.numel(); ++i) {
    if (std::memcmp(gb + i * es, wb + i * es, es) != 0 && count++ == 0) first = i;
  }
  const int64_t cols = g.dim() == 0 ? 1 : g.size(-1);
  const Tensor gf = g.reshape({g.numel()}), wf = w.reshape({w.numel()});
  os.precision(17);
  os << count << " of " << g.numel() << " elements differ (shape " << shape_str(g.sizes())
     << ", dtype " << name_of(g.dtype()) << "); first at flat index " << first << " (row "
     << first / cols << ", col " << first % cols << "): gpu " << gf.narrow(0, first, 1).item()
     << ", cpu " << wf.narrow(0, first, 1).item();
  return os.str();
}

#define CHECK_SAME_BITS(got, want)                   \
  do {                                               \
    const std::string diff_ = bit_difference((got), (want)); \
    INFO(diff_);                                     \
    CHECK(diff_.empty());                            \
  } while (0)

// The table's gradient of embedding(table, indices).backward(grad_out), with the
// table a zero leaf of `shape` / `dtype` on `device`.
Tensor table_grad(const Shape& shape, DType dtype, const Tensor& indices, const Tensor& grad_out,
                  Device device) {
  const Tensor table = zeros(shape, {.dtype = dtype, .device = device}).requires_grad_();
  embedding(table, indices.to(device)).backward(grad_out.to(device));
  REQUIRE(table.grad().defined());
  REQUIRE(table.grad().device() == device);
  return table.grad();
}

}  // namespace

TEST_CASE("CUDA embedding forward equals the CPU gather bit for bit for every dtype and size",
          "[gpu][embedding]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  Generator gen(seed);
  std::mt19937 rng(seed);
  for (DType dtype : kAllDtypes) {
    for (int64_t vocab : kVocabs) {
      for (int64_t dim : kDims) {
        // The 50257 x 768 table (38.6M elements) only for one dtype of each
        // element size that copies in different units; the rest is covered by the
        // other sizes.
        const bool big = vocab * dim > 10'000'000;
        if (big && dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::u8) continue;
        const Tensor table = random_cpu_philox({vocab, dim}, dtype, gen, -2, 2);
        const Tensor table_gpu = table.to(kGpu);
        for (int64_t tokens : kTokens) {
          CAPTURE(name_of(dtype), vocab, dim, tokens);
          const Tensor idx = random_indices({tokens}, vocab, rng);
          const Tensor want = embedding(table, idx);
          const Tensor got = embedding(table_gpu, idx.to(kGpu));
          REQUIRE(got.device() == kGpu);
          CHECK_SAME_BITS(got, want);
        }
      }
    }
  }
}

TEST_CASE("CUDA embedding of index tensors of any shape, strided and unaligned tables",
          "[gpu][embedding]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  Generator gen(seed);
  std::mt19937 rng(seed);
  for (DType dtype : kAllDtypes) {
    CAPTURE(name_of(dtype));
    const Tensor table = random_cpu_philox({300, 37}, dtype, gen, -2, 2);
    const Tensor table_gpu = table.to(kGpu);
    // 2-D and 3-D index tensors, a transposed (non-contiguous) one, a 0-d one and an empty one.
    const Tensor idx2 = random_indices({16, 33}, 300, rng);
    const Tensor idx3 = random_indices({2, 3, 5}, 300, rng);
    for (const Tensor& idx : {idx2, idx3, idx2.t(), scalar_tensor(299, DType::i64),
                              from_vector<int64_t>({})}) {
      CAPTURE(idx.sizes());
      const Tensor want = embedding(table, idx);
      const Tensor got = embedding(table_gpu, idx.to(kGpu));
      Shape expected = idx.sizes();
      expected.push_back(37);
      CHECK(got.sizes() == expected);
      CHECK_SAME_BITS(got, want);
    }
    // A transposed table (copied to contiguous first) and tables starting 1, 2 or
    // 3 rows into their storage (row starts misaligned for the 16-byte copy).
    const Tensor wide = random_cpu_philox({37, 300}, dtype, gen, -2, 2);
    CHECK_SAME_BITS(embedding(wide.to(kGpu).t(), idx2.to(kGpu)), embedding(wide.t(), idx2));
    for (int64_t skip : {1, 2, 3}) {
      for (int64_t dim : {1, 3, 5, 8}) {
        CAPTURE(skip, dim);
        const Tensor base = random_cpu_philox({64 + skip, dim}, dtype, gen, -2, 2);
        const Tensor offset_cpu = base.narrow(0, skip, 64);
        const Tensor offset_gpu = base.to(kGpu).narrow(0, skip, 64);
        REQUIRE(offset_gpu.is_contiguous());
        const Tensor idx = random_indices({100}, 64, rng);
        CHECK_SAME_BITS(embedding(offset_gpu, idx.to(kGpu)), embedding(offset_cpu, idx));
      }
    }
  }
  // Rows of zero width, and a table with no rows looked up by no index.
  CHECK(embedding(zeros({5, 0}, {.device = kGpu}), from_vector<int64_t>({1, 2}).to(kGpu)).sizes() ==
        Shape{2, 0});
  CHECK(embedding(zeros({0, 4}, {.device = kGpu}), from_vector<int64_t>({}).to(kGpu)).sizes() ==
        Shape{0, 4});
}

TEST_CASE("CUDA embedding backward with repeated indices equals the CPU bit for bit",
          "[gpu][embedding]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  Generator gen(seed);
  std::mt19937 rng(seed);
  for (DType dtype : kFloating) {
    for (int64_t vocab : kVocabs) {
      for (int64_t dim : kDims) {
        for (int64_t tokens : kTokens) {
          // Big tables (up to 38.6M gradient elements) only with 7 and 4096 tokens.
          if (vocab * dim > 1'000'000 && tokens != 7 && tokens != 4096) continue;
          CAPTURE(name_of(dtype), vocab, dim, tokens);
          // Half the tokens look up one row: long runs of repeats in one row's sum.
          const Tensor idx = random_indices({tokens}, vocab, rng, 0.5);
          const Tensor grad_out = random_cpu_philox({tokens, dim}, dtype, gen, -2, 2);
          const Tensor want = table_grad({vocab, dim}, dtype, idx, grad_out, kCpu);
          const Tensor got = table_grad({vocab, dim}, dtype, idx, grad_out, kGpu);
          CHECK_SAME_BITS(got, want);
        }
      }
    }
  }
}

TEST_CASE("CUDA embedding backward over 1, 2 and 3 sort passes, many chunks and all-equal indices",
          "[gpu][embedding]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  Generator gen(seed);
  std::mt19937 rng(seed);
  for (DType dtype : kFloating) {
    // vocab 257 and 65536 sort 9 and 16 bits in 2 passes, 65537 and 70000 need 3;
    // 100003 tokens make 98 sort chunks (25 blocks); index shapes of 2 dims.
    for (int64_t vocab : {2, 256, 257, 65536, 65537, 70000}) {
      for (int64_t tokens : {1025, 100003}) {
        CAPTURE(name_of(dtype), vocab, tokens);
        const Tensor idx = random_indices({tokens}, vocab, rng, 0.25);
        const Tensor grad_out = random_cpu_philox({tokens, 5}, dtype, gen, -2, 2);
        CHECK_SAME_BITS(table_grad({vocab, 5}, dtype, idx, grad_out, kGpu),
                        table_grad({vocab, 5}, dtype, idx, grad_out, kCpu));
      }
    }
    // Every token on one row (a padding token): one row sums 4096 gradients in order.
    for (int64_t row : {0, 3, 4}) {
      CAPTURE(name_of(dtype), row);
      const Tensor idx = full({64, 64}, row, {.dtype = DType::i64});
      const Tensor grad_out = random_cpu_philox({64, 64, 768}, dtype, gen, -2, 2);
      const Tensor got = table_grad({5, 768}, dtype, idx, grad_out, kGpu);
      CHECK_SAME_BITS(got, table_grad({5, 768}, dtype, idx, grad_out, kCpu));
      // The other rows are exactly 0.
      const std::vector<double> g = got.to(kCpu).to(DType::f64).to_vector<double>();
      int64_t nonzero = 0;
      for (int64_t r = 0; r < 5; ++r) {
        for (int64_t c = 0; c < 768; ++c) nonzero += r != row && g[r * 768 + c] != 0.0;
      }
      CHECK(nonzero == 0);
    }
    // A strided incoming gradient and no tokens at all (a zero gradient).
    const Tensor idx = random_indices({40}, 9, rng, 0.5);
    const Tensor grad_t = random_cpu_philox({6, 40}, dtype, gen, -2, 2).t();  // [40, 6], non-contiguous
    CHECK_SAME_BITS(table_grad({9, 6}, dtype, idx, grad_t, kGpu),
                    table_grad({9, 6}, dtype, idx, grad_t, kCpu));
    const Tensor none = table_grad({9, 6}, dtype, from_vector<int64_t>({}),
                                   empty({0, 6}, {.dtype = dtype}), kGpu);
    CHECK_SAME_BITS(none, zeros({9, 6}, {.dtype = dtype}));
  }
}

TEST_CASE("CUDA embedding forward and backward give bitwise the same result on every run",
          "[gpu][embedding]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  Generator gen(seed);
  std::mt19937 rng(seed);
  for (DType dtype : {DType::f32, DType::bf16}) {
    CAPTURE(name_of(dtype));
    const Tensor idx = random_indices({8, 512}, 50257, rng, 0.3).to(kGpu);
    const Tensor grad_out = random_cpu_philox({8, 512, 768}, dtype, gen, -2, 2).to(kGpu);
    const Tensor table = random_cpu_philox({50257, 768}, dtype, gen, -2, 2).to(kGpu);
    const Tensor first_out = embedding(table, idx);
    const Tensor first = table_grad({50257, 768}, dtype, idx, grad_out, kGpu);
    for (int run = 0; run < 2; ++run) {
      CHECK_SAME_BITS(embedding(table, idx), first_out);
      CHECK_SAME_BITS(table_grad({50257, 768}, dtype, idx, grad_out, kGpu), first);
    }
  }
}

TEST_CASE("CUDA embedding with an out-of-range index gives the CPU's error", "[gpu][embedding]") {
  const Tensor table = zeros({5, 3});
  const Tensor table_gpu = table.to(kGpu);
  auto both = [&](const Tensor& idx) {
    const std::string cpu = error_of([&] { embedding(table, idx); });
    const std::string gpu = error_of([&] { embedding(table_gpu, idx.to(kGpu)); });
    CHECK(gpu == cpu);  // the same check, line and message
    return gpu;
  };
  CHECK_THAT(both(from_vector<int64_t>({0, 1, 7})),
             Catch::Contains("embedding: index 7 at position 2 (of indices with shape [3]) is out "
                             "of range for a weight with 5 rows (expected 0 <= index < 5)"));
  CHECK_THAT(both(from_vector<int64_t>({-1})), Catch::Contains("embedding: index -1 at position 0"));
  CHECK_THAT(both(from_vector<int64_t>({5, 4})), Catch::Contains("embedding: index 5 at position 0"));
  // The first bad position wins, across blocks of the check kernel.
  std::vector<int64_t> many(200000, 4);
  many[123457] = 99999;
  many[150000] = -5;
  many[199999] = 5;
  CHECK_THAT(both(from_vector<int64_t>(many, {400, 500})),
             Catch::Contains("embedding: index 99999 at position 123457 (of indices with shape "
                             "[400, 500])"));
  // Bad indices are also caught when no gradient is needed, and the device stays usable.
  {
    NoGradGuard no_grad;
    CHECK_THROWS_AS(embedding(table_gpu, from_vector<int64_t>({9}).to(kGpu)), Error);
  }
  CHECK(embedding(table_gpu, from_vector<int64_t>({4}).to(kGpu)).to(kCpu).to_vector<float>() ==
        std::vector<float>{0, 0, 0});
  // Operands on different devices, and non-i64 indices.
  CHECK_THROWS_WITH(embedding(table_gpu, from_vector<int64_t>({1})),
                    Catch::Contains("embedding: expected all operands on cuda:0, but operand 1 is on cpu"));
  CHECK_THROWS_WITH(embedding(table_gpu, from_vector<int32_t>({1}).to(kGpu)),
                    Catch::Contains("embedding: indices must have dtype i64, got i32"));
}
