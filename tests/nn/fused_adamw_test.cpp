// AdamW's fused kernels (its default, and FusedAdamW) against AdamW op by op
// (.fused = false): bit-identical parameters and moments over several steps with
// weight decay, an lr change and a skipped parameter, on f32 and f64 parameters of
// mixed sizes (empty, odd, larger than one thread's share); identical results on 1
// and 2 threads; state_dicts moving both ways; strided grads; the fallback to op by
// op for parameters the kernels cannot take; input errors.
#include "dtr/base/error.h"
#include "dtr/kernels/cpu/parallel.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/optim/fused_adamw.h"
#include "optimizer_parity.h"
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/random.h"

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

void check_matches_adamw(DType dtype) {
  check_fused_matches<OpByOpAdamW, AdamW>(dtype, kOptions);
  check_fused_matches<OpByOpAdamW, FusedAdamW>(dtype, kOptions);
}

// Tensors allocated on the CPU by one step() of `opt` (after the step that creates its state).
int64_t allocations_in_one_step(Optimizer& opt) {
  const int64_t before = memory_stats(Device::cpu()).total.num_allocations;
  opt.step();
  return memory_stats(Device::cpu()).total.num_allocations - before;
}

}  // namespace

TEST_CASE("AdamW and FusedAdamW match AdamW op by op bit for bit on f32 parameters of mixed sizes over five steps") {
  check_matches_adamw(DType::f32);
}

TEST_CASE("AdamW and FusedAdamW match AdamW op by op bit for bit on f64 parameters over five steps") {
  check_matches_adamw(DType::f64);
}

TEST_CASE("AdamW matches AdamW op by op with weight decay zero and default options") {
  std::vector<Tensor> a = make_params(DType::f32, 11);
  std::vector<Tensor> b = clone_params(a);
  OpByOpAdamW ref(a, {.weight_decay = 0.0});
  AdamW fused(b, {.weight_decay = 0.0});
  run_both(ref, fused, 3, 200);
  check_same(ref, fused);
  std::vector<Tensor> c = make_params(DType::f32, 12);
  std::vector<Tensor> d = clone_params(c);
  OpByOpAdamW ref2(c, {});
  AdamW fused2(d, {});
  run_both(ref2, fused2, 3, 300);
  check_same(ref2, fused2);
}

TEST_CASE("AdamW gives identical results on 1 and 2 threads") {
  check_thread_count_independent<AdamW>(kOptions);
}

TEST_CASE("fused and op-by-op AdamW state dicts load into each other and continue identically") {
  check_state_dicts_interchange<OpByOpAdamW, AdamW>(kOptions, "AdamW");
  check_state_dicts_interchange<AdamW, FusedAdamW>(kOptions, "AdamW");
}

TEST_CASE("AdamW copies a strided grad and matches AdamW op by op") {
  check_strided_grad<OpByOpAdamW, AdamW>(kOptions);
}

TEST_CASE("AdamW steps contiguous parameters in one fused pass, without temporary tensors") {
  std::vector<Tensor> a = make_params(DType::f32, 21);
  std::vector<Tensor> b = clone_params(a);
  set_grads(a, b, 22, a.size());
  AdamW fused(a, kOptions);
  OpByOpAdamW op_by_op(b, kOptions);
  fused.step();  // creates the state
  op_by_op.step();
  CHECK(allocations_in_one_step(fused) == 0);
  CHECK(allocations_in_one_step(op_by_op) > 0);  // its temporaries, which the measure sees
}

TEST_CASE("a fused AdamW step bumps the versions of the parameters and moments it writes") {
  // As the op-by-op in-place updates do: FSDP re-gathers a shard whose version moved.
  std::vector<Tensor> a = make_params(DType::f32, 23);
  set_grads(a, a, 24, a.size());
  AdamW adamw(a, kOptions);
  adamw.step();
  const uint64_t param_version = a[4].storage().version();
  const uint64_t moment_version = adamw.state(4).tensors.at("exp_avg").storage().version();
  adamw.step();
  CHECK(a[4].storage().version() > param_version);
  CHECK(adamw.state(4).tensors.at("exp_avg").storage().version() > moment_version);
}

TEST_CASE("AdamW steps a non-contiguous parameter op by op, and refuses it with fused = true") {
  Tensor strided = randn({3, 4}).t();
  strided.requires_grad_();
  Tensor reference = strided.detach().clone();
  reference.requires_grad_();
  const Tensor grad = randn({4, 3});
  strided.set_grad(grad.clone());
  reference.set_grad(grad.clone());
  const std::vector<float> initial = reference.to_vector<float>();
  AdamW adamw({strided}, kOptions);
  OpByOpAdamW op_by_op({reference}, kOptions);
  adamw.step();
  op_by_op.step();
  CHECK(strided.contiguous().to_vector<float>() == reference.contiguous().to_vector<float>());
  CHECK(reference.to_vector<float>() != initial);
  AdamWOptions required = kOptions;
  required.fused = true;
  CHECK_THROWS_WITH(AdamW({strided}, required), Catch::Contains("not contiguous") && Catch::Contains(".fused = false"));
}

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
