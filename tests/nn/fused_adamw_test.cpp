// FusedAdamW (nn/optim/fused_adamw.h) against the op-by-op AdamW: bit-identical
// parameters and moments over several steps with weight decay, an lr change and a
// skipped parameter, on f32 and f64 parameters of mixed sizes (empty, odd, larger
// than one thread's share); identical results on 1 and 2 threads; state_dicts
// moving both ways between AdamW and FusedAdamW; strided grads; input errors.
#include "base/error.h"
#include "kernels/cpu/parallel.h"
#include "nn/optim/adamw.h"
#include "nn/optim/fused_adamw.h"
#include "optimizer_parity.h"
#include "tensor/factory.h"
#include "tensor/random.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

using namespace dtr;
using namespace dtr::nn::optim;
using namespace dtr::testing::optim;

namespace {

const AdamWOptions kOptions{.lr = 3e-3, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6,
                            .weight_decay = 0.1};

void check_matches_adamw(DType dtype) { check_fused_matches<AdamW, FusedAdamW>(dtype, kOptions); }

}  // namespace

TEST_CASE("FusedAdamW matches AdamW bit for bit on f32 parameters of mixed sizes over five steps") {
  check_matches_adamw(DType::f32);
}

TEST_CASE("FusedAdamW matches AdamW bit for bit on f64 parameters over five steps") {
  check_matches_adamw(DType::f64);
}

TEST_CASE("FusedAdamW matches AdamW with weight decay zero and default options") {
  std::vector<Tensor> a = make_params(DType::f32, 11);
  std::vector<Tensor> b = clone_params(a);
  AdamW ref(a, {.weight_decay = 0.0});
  FusedAdamW fused(b, {.weight_decay = 0.0});
  run_both(ref, fused, 3, 200);
  check_same(ref, fused);
  std::vector<Tensor> c = make_params(DType::f32, 12);
  std::vector<Tensor> d = clone_params(c);
  AdamW ref2(c, {});
  FusedAdamW fused2(d, {});
  run_both(ref2, fused2, 3, 300);
  check_same(ref2, fused2);
}

TEST_CASE("FusedAdamW gives identical results on 1 and 2 threads") {
  check_thread_count_independent<FusedAdamW>(kOptions);
}

TEST_CASE("FusedAdamW and AdamW state dicts load into each other and continue identically") {
  check_state_dicts_interchange<AdamW, FusedAdamW>(kOptions, "AdamW");
}

TEST_CASE("FusedAdamW copies a strided grad and matches AdamW") { check_strided_grad<AdamW, FusedAdamW>(kOptions); }

TEST_CASE("FusedAdamW refuses non-contiguous parameters and bad options") {
  Tensor strided = randn({3, 4}).t();
  strided.requires_grad_();
  REQUIRE(!strided.is_contiguous());
  CHECK_THROWS_WITH(FusedAdamW({strided}, {}), Catch::Contains("not contiguous"));
  Tensor p = randn({3});
  p.requires_grad_();
  CHECK_THROWS_WITH(FusedAdamW({p}, {.beta2 = 1.0}), Catch::Contains("beta2"));
  CHECK_THROWS_WITH(FusedAdamW({p}, {.eps = -1.0}), Catch::Contains("eps"));
  CHECK_THROWS_WITH(FusedAdamW({p}, {.weight_decay = -0.1}), Catch::Contains("weight_decay"));
}
