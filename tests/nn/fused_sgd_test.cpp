// SGD's fused kernels (its default, and FusedSGD) against SGD op by op (.fused =
// false): bit-identical parameters and momentum buffers over several steps, for
// every combination of momentum, dampening, Nesterov and weight decay, with an lr
// change and a skipped parameter, on f32 and f64 parameters of mixed sizes (empty,
// odd, larger than one thread's share); identical results on 1 and 2 threads;
// state_dicts moving both ways; strided grads; input errors.
#include "dtr/base/error.h"
#include "dtr/nn/optim/fused_sgd.h"
#include "dtr/nn/optim/sgd.h"
#include "optimizer_parity.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/random.h"

#include <catch2/catch.hpp>

#include <vector>

using namespace dtr;
using namespace dtr::nn::optim;
using namespace dtr::testing::optim;

namespace {

const std::vector<SGDOptions> kVariants = {
    {.lr = 0.05},
    {.lr = 0.05, .weight_decay = 0.01},
    {.lr = 0.05, .momentum = 0.9},
    {.lr = 0.05, .momentum = 0.9, .dampening = 0.25, .weight_decay = 0.01},
    {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true},
    {.lr = 0.05, .momentum = 0.7, .nesterov = true},
};

std::string describe(const SGDOptions& o) {
  return "momentum " + std::to_string(o.momentum) + ", dampening " + std::to_string(o.dampening) +
         ", weight_decay " + std::to_string(o.weight_decay) + (o.nesterov ? ", nesterov" : "");
}

void check_matches_sgd(DType dtype) {
  for (const SGDOptions& options : kVariants) {
    INFO(describe(options));
    check_fused_matches<OpByOpSGD, SGD>(dtype, options);
    check_fused_matches<OpByOpSGD, FusedSGD>(dtype, options);
  }
}

}  // namespace

TEST_CASE("SGD and FusedSGD match SGD op by op bit for bit on f32 parameters for every momentum, Nesterov and decay setting") {
  check_matches_sgd(DType::f32);
}

TEST_CASE("SGD and FusedSGD match SGD op by op bit for bit on f64 parameters") { check_matches_sgd(DType::f64); }

TEST_CASE("FusedSGD keeps a momentum buffer only with momentum, as SGD does") {
  std::vector<Tensor> a = make_params(DType::f32, 8);
  FusedSGD plain(a, {.lr = 0.1});
  FusedSGD heavy(clone_params(a), {.lr = 0.1, .momentum = 0.9});
  set_grads(plain.params(), heavy.params(), 9, 99);
  plain.step();
  heavy.step();
  CHECK(plain.state(0).tensors.empty());
  REQUIRE(heavy.state(0).tensors.count("momentum_buffer") == 1);
  // After the first step the buffer is the gradient itself.
  CHECK(same_bits(heavy.state(5).tensors.at("momentum_buffer"), heavy.params()[5]->grad()));
}

TEST_CASE("FusedSGD gives identical results on 1 and 2 threads") {
  check_thread_count_independent<FusedSGD>(
      SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
}

TEST_CASE("fused and op-by-op SGD state dicts load into each other and continue identically") {
  check_state_dicts_interchange<OpByOpSGD, SGD>(
      SGDOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01}, "SGD");
}

TEST_CASE("SGD copies a strided grad and matches SGD op by op") {
  check_strided_grad<OpByOpSGD, SGD>(SGDOptions{.lr = 0.05, .momentum = 0.9});
}

TEST_CASE("FusedSGD refuses non-contiguous parameters and bad options") {
  Tensor strided = randn({3, 4}).t();
  strided.requires_grad_();
  REQUIRE(!strided.is_contiguous());
  CHECK_THROWS_WITH(FusedSGD({strided}, {}), Catch::Contains("not contiguous") && Catch::Contains("use SGD"));
  Tensor p = randn({3});
  p.requires_grad_();
  CHECK_THROWS_WITH(FusedSGD({p}, {.momentum = -0.5}), Catch::Contains("FusedSGD: momentum"));
  CHECK_THROWS_WITH(FusedSGD({p}, {.weight_decay = -0.1}), Catch::Contains("weight_decay"));
  CHECK_THROWS_WITH(FusedSGD({p}, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                    Catch::Contains("nesterov needs momentum > 0 and dampening == 0"));
  CHECK_THROWS_WITH(FusedSGD({p}, {.lr = -1.0}), Catch::Contains("lr must be finite and >= 0"));
}
