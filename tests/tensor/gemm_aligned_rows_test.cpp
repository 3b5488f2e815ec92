// The padded-row rule of dtr/tensor/ops/gemm_aligned_rows.h (shared by matmul's operand
// copies and cross_entropy's cuda backward) against hand-computed strides, and the
// autograd consumers of a gradient with padded rows (what cross_entropy's cuda
// backward returns for large bf16/f16 logits): reshape back to [B, T, V] as a view,
// linear's and matmul's backwards, the engine's sum of two gradients of one tensor,
// and a leaf's .grad (a fresh contiguous tensor, then accumulated into). On the cpu
// the padded views are made by hand (a hook replaces the gradient with one), since
// the cpu ops never pad; values are small integers, so every result is exact and
// compared bit for bit with the contiguous run.
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/gemm_aligned_rows.h"
#include "dtr/tensor/ops/matmul.h"
#include "dtr/tensor/ops/reduce.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

using namespace dtr;

namespace {

// Small integers (-3 .. 3) in f32, different for each `salt`: exact in every sum below.
Tensor integers(const Shape& shape, int64_t salt) {
  std::vector<float> v(static_cast<size_t>(numel_of(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((static_cast<int64_t>(i) * 5 + salt * 3) % 7 - 3);
  return from_vector(v, shape);
}

// A copy of g [rows, cols] whose rows are stored 16 elements apart (cols < 16), like
// cross_entropy's cuda dlogits: the narrow view of a [rows, 16] buffer.
Tensor with_padded_rows(const Tensor& g) {
  Tensor p = empty({g.size(0), 16}, {.dtype = g.dtype()}).narrow(1, 0, g.size(1));
  p.copy_(g);
  return p;
}

bool same_values(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && a.contiguous().to_vector<float>() == b.contiguous().to_vector<float>();
}

}  // namespace

TEST_CASE("gemm_row_stride pads large 16-bit rows to 16 bytes and leaves others alone", "[matmul]") {
  using ops::gemm_row_stride;
  // GPT-2's logits [8192, 50257]: 50257 rounded up to a multiple of 8 is 50264.
  CHECK(gemm_row_stride(DType::bf16, 8192, 50257) == 50264);
  CHECK(gemm_row_stride(DType::f16, 8192, 50257) == 50264);
  // 1024 x 1025 = 1049600 >= 2^20 = 1048576: 1025 -> 1032.
  CHECK(gemm_row_stride(DType::bf16, 1024, 1025) == 1032);
  CHECK(gemm_row_stride(DType::f16, 1025, 1024 + 1) == 1032);
  // 1023 x 1025 = 1048575, one element short of 2^20: not padded.
  CHECK(gemm_row_stride(DType::bf16, 1023, 1025) == 1025);
  // Exactly 2^20 elements qualifies: 1 x 1048577 -> 1048584, 8 x 131073 -> 131080.
  CHECK(gemm_row_stride(DType::bf16, 1, 1048577) == 1048584);
  CHECK(gemm_row_stride(DType::bf16, 8, 131073) == 131080);
  // Rows already a multiple of 8 elements keep their width.
  CHECK(gemm_row_stride(DType::bf16, 8192, 50264) == 50264);
  CHECK(gemm_row_stride(DType::f16, 4096, 4096) == 4096);
  // Other element sizes: never padded (no tensor-core path reads them).
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64, DType::u8}) {
    CAPTURE(std::string(dtype_name(dtype)));
    CHECK(gemm_row_stride(dtype, 8192, 50257) == 50257);
  }
  CHECK(gemm_row_stride(DType::bf16, 0, 50257) == 50257);
  CHECK(ops::gemm_wants_aligned_rows(DType::bf16, 1024, 1024));
  CHECK_FALSE(ops::gemm_wants_aligned_rows(DType::bf16, 1024, 1023));
  CHECK_FALSE(ops::gemm_wants_aligned_rows(DType::f32, 8192, 50257));
}

TEST_CASE("empty_with_gemm_aligned_rows is contiguous off cuda", "[matmul]") {
  // Only cuda tensors are padded; the cpu and meta get plain contiguous tensors.
  for (Device device : {Device::cpu(), Device::meta()}) {
    const Tensor t = ops::empty_with_gemm_aligned_rows({1024, 1025}, {.dtype = DType::bf16, .device = device});
    CHECK(t.sizes() == Shape{1024, 1025});
    CHECK(t.strides() == Shape{1025, 1});
    CHECK(t.dtype() == DType::bf16);
    CHECK(t.device() == device);
  }
  CHECK(ops::empty_with_gemm_aligned_rows({5}, {.dtype = DType::bf16}).sizes() == Shape{5});
}

TEST_CASE("a gradient with padded rows flows through reshape and linear like a contiguous one",
          "[autograd][matmul]") {
  // The tied head of a [2, 3] batch over a vocabulary of 13: logits = h . W^T, flattened
  // to [6, 13] for the loss (which here is sum(logits * upstream)).
  const Tensor h = integers({2, 3, 5}, 1), w = integers({13, 5}, 2), upstream = integers({6, 13}, 3);
  for (bool use_linear : {true, false}) {
    CAPTURE(use_linear);
    Tensor dh[2], dw[2];
    int head_grads_seen = 0;
    for (int padded = 0; padded < 2; ++padded) {
      const Tensor hd = h.detach().requires_grad_(), wd = w.detach().requires_grad_();
      const Tensor logits = use_linear ? linear(hd, wd) : matmul(hd, wd.t());  // [2, 3, 13]
      const Tensor flat = logits.reshape({-1, 13});
      if (padded == 1) {
        flat.register_hook([](const Tensor& g) { return with_padded_rows(g); });
        // ReshapeBackward hands the head the padded rows as a [2, 3, 13] view, not a copy.
        logits.register_hook([&](const Tensor& g) {
          CHECK(g.strides() == Shape{48, 16, 1});
          ++head_grads_seen;
          return Tensor();
        });
      }
      sum(mul(flat, upstream)).backward();
      dh[padded] = hd.grad();
      dw[padded] = wd.grad();
    }
    CHECK(head_grads_seen == 1);
    CHECK(same_values(dh[1], dh[0]));
    CHECK(same_values(dw[1], dw[0]));
    CHECK(dh[1].is_contiguous());
    CHECK(dw[1].is_contiguous());
  }
}

TEST_CASE("a gradient with padded rows sums with another gradient and accumulates into a leaf",
          "[autograd]") {
  const Tensor c1 = integers({6, 13}, 4), c2 = integers({6, 13}, 5);
  const Tensor x = integers({6, 13}, 6).requires_grad_();
  auto loss = [&] {
    // x reaches the loss twice: through a reshape whose gradient gets padded rows
    // (the engine sums it with the other, contiguous one) and directly.
    const Tensor viewed = x.reshape({6, 13});
    viewed.register_hook([](const Tensor& g) { return with_padded_rows(g); });
    return sum(mul(viewed, c1)) + sum(mul(x, c2));
  };
  loss().backward();
  const Tensor once = c1 + c2;
  CHECK(same_values(x.grad(), once));
  CHECK(x.grad().is_contiguous());
  // The only gradient of a leaf with padded rows: .grad becomes a contiguous copy; a
  // second backward adds into it.
  const Tensor y = integers({6, 13}, 7).requires_grad_();
  for (int i = 0; i < 2; ++i) {
    const Tensor viewed = y.reshape({6, 13});
    viewed.register_hook([](const Tensor& g) { return with_padded_rows(g); });
    sum(mul(viewed, c1)).backward();
    CHECK(y.grad().is_contiguous());
  }
  CHECK(same_values(y.grad(), c1 + c1));
}
