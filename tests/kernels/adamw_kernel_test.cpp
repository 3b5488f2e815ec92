// The fused AdamW kernel (dtr/kernels/cpu/adamw.h) directly: bf16 and f16 grads give
// exactly what the same values widened to f32 give, across several tensors in one
// call (sizes around the staging and vector widths, an empty one, differing steps).
#include "dtr/kernels/cpu/adamw.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

using namespace dtr;
using namespace dtr::kernels::cpu;

namespace {

struct Arrays {
  std::vector<float> p, m, v;
};

template <class G>
void check_half_grads_match_f32() {
  const std::vector<int64_t> sizes = {5, 0, 1023, 1025, 4096 + 3};
  const AdamWHyper hyper{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.05};
  std::vector<Arrays> half_side, f32_side;
  std::vector<std::vector<G>> half_grads;
  std::vector<std::vector<float>> f32_grads;
  for (size_t k = 0; k < sizes.size(); ++k) {
    Arrays a;
    std::vector<G> gh;
    std::vector<float> gf;
    for (int64_t i = 0; i < sizes[k]; ++i) {
      const auto x = static_cast<float>(i);
      a.p.push_back(std::sin(0.37f * x + static_cast<float>(k)));
      a.m.push_back(0.01f * std::cos(x));
      a.v.push_back(1e-4f * (1.0f + std::sin(x) * std::sin(x)));
      gh.push_back(G(std::cos(1.3f * x) * 2.0f));
      gf.push_back(static_cast<float>(gh.back()));
    }
    half_side.push_back(a);
    f32_side.push_back(a);
    half_grads.push_back(gh);
    f32_grads.push_back(gf);
  }
  std::vector<AdamWTensor<float, G>> th;
  std::vector<AdamWTensor<float, float>> tf;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const int64_t step = 1 + static_cast<int64_t>(k);
    th.push_back({half_side[k].p.data(), half_grads[k].data(), half_side[k].m.data(),
                  half_side[k].v.data(), sizes[k], step});
    tf.push_back({f32_side[k].p.data(), f32_grads[k].data(), f32_side[k].m.data(),
                  f32_side[k].v.data(), sizes[k], step});
  }
  adamw(th.data(), th.size(), hyper);
  adamw(tf.data(), tf.size(), hyper);
  for (size_t k = 0; k < sizes.size(); ++k) {
    INFO("tensor " << k << " of " << sizes[k] << " elements");
    CHECK(half_side[k].p == f32_side[k].p);
    CHECK(half_side[k].m == f32_side[k].m);
    CHECK(half_side[k].v == f32_side[k].v);
    if (sizes[k] > 0) CHECK(half_side[k].p[0] != std::sin(static_cast<float>(k)));  // it moved
  }
}

}  // namespace

TEST_CASE("adamw kernel with bf16 grads equals the kernel on the grads widened to f32") {
  check_half_grads_match_f32<bf16>();
}

TEST_CASE("adamw kernel with f16 grads equals the kernel on the grads widened to f32") {
  check_half_grads_match_f32<f16>();
}
