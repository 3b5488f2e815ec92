// SGD, Adam and AdamW (nn/optim/) against the PyTorch recurrences written as
// plain double loops: three steps on small f32 and f64 parameters with fixed
// gradients; zero_grad, skipped parameters, state_dict round trips, optimizer
// state memory accounting and input errors; parameter groups, each against the
// recurrence with its own hyperparameters.
#include "dtr/base/error.h"
#include "dtr/nn/optim/adam.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/optim/lr_schedule.h"
#include "dtr/nn/optim/sgd.h"
#include "dtr/nn/optim/weight_decay_groups.h"
#include "dtr/nn/linear.h"
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <vector>

using namespace dtr;
using namespace dtr::nn::optim;

namespace {

using Vec = std::vector<double>;

const Vec kInit = {0.5, -1.25, 2.0, 0.75, -0.3, 1.1};

// The gradient fed at step t (0-based): fixed values that change with t.
Vec grad_at(int t) {
  Vec g(kInit.size());
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = (0.3 * static_cast<double>(i) - 0.7) * (1.0 + 0.5 * t) + (t % 2 == 0 ? 0.1 : -0.2);
  }
  return g;
}

Tensor make_param(const Vec& values, DType dtype) {
  Tensor p = from_vector<double>(values, {2, 3}).to(dtype);
  p.requires_grad_();
  return p;
}

void set_grad(const Tensor& p, const Vec& g) {
  p.set_grad(from_vector<double>(g, {2, 3}).to(p.dtype()));
}

Vec values(const Tensor& t) { return t.detach().to(DType::f64).to_vector<double>(); }

void check_abs_close(const Vec& actual, const Vec& expected, double tol = 1e-6) {
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    INFO("index " << i << ": expected " << expected[i] << ", actual " << actual[i]);
    CHECK(std::abs(actual[i] - expected[i]) <= tol);
  }
}

Vec sgd_reference(const SGDOptions& o, int steps) {
  Vec p = kInit;
  Vec buf(p.size(), 0.0);
  for (int t = 0; t < steps; ++t) {
    const Vec grad = grad_at(t);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i] + o.weight_decay * p[i];
      if (o.momentum != 0.0) {
        buf[i] = t == 0 ? g : o.momentum * buf[i] + (1.0 - o.dampening) * g;
        g = o.nesterov ? g + o.momentum * buf[i] : buf[i];
      }
      p[i] -= o.lr * g;
    }
  }
  return p;
}

Vec adam_reference(const AdamOptions& o, bool decoupled, int steps) {
  Vec p = kInit;
  Vec m(p.size(), 0.0);
  Vec v(p.size(), 0.0);
  for (int t = 1; t <= steps; ++t) {
    const Vec grad = grad_at(t - 1);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i];
      if (decoupled) {
        p[i] *= 1.0 - o.lr * o.weight_decay;
      } else {
        g += o.weight_decay * p[i];
      }
      m[i] = o.beta1 * m[i] + (1.0 - o.beta1) * g;
      v[i] = o.beta2 * v[i] + (1.0 - o.beta2) * g * g;
      const double m_hat = m[i] / (1.0 - std::pow(o.beta1, t));
      const double v_hat = v[i] / (1.0 - std::pow(o.beta2, t));
      p[i] -= o.lr * m_hat / (std::sqrt(v_hat) + o.eps);
    }
  }
  return p;
}

// Runs `steps` steps of `opt` on `p`, feeding grad_at(t0 + t).
void run_steps(Optimizer& opt, const Tensor& p, int t0, int steps) {
  for (int t = t0; t < t0 + steps; ++t) {
    set_grad(p, grad_at(t));
    opt.step();
  }
}

}  // namespace

TEST_CASE("SGD matches the PyTorch recurrence for plain, momentum, nesterov and weight decay", "[optim]") {
  const std::vector<SGDOptions> cases = {
      {.lr = 0.1},
      {.lr = 0.05, .momentum = 0.9},
      {.lr = 0.05, .momentum = 0.8, .dampening = 0.25},
      {.lr = 0.05, .momentum = 0.9, .nesterov = true},
      {.lr = 0.1, .weight_decay = 0.2},
      {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.1, .nesterov = true},
  };
  for (DType dtype : {DType::f32, DType::f64}) {
    for (size_t c = 0; c < cases.size(); ++c) {
      INFO("case " << c << ", dtype " << dtype_name(dtype));
      Tensor p = make_param(kInit, dtype);
      SGD opt({p}, cases[c]);
      run_steps(opt, p, 0, 3);
      check_abs_close(values(p), sgd_reference(cases[c], 3));
      CHECK(opt.state(0).step == 3);
      CHECK(opt.state(0).tensors.size() == (cases[c].momentum != 0.0 ? 1u : 0u));
      CHECK(p.dtype() == dtype);
      CHECK(p.requires_grad());
    }
  }
}

TEST_CASE("Adam matches the bias-corrected recurrence with and without L2 weight decay", "[optim]") {
  const std::vector<AdamOptions> cases = {
      {.lr = 0.01},
      {.lr = 0.02, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1},
  };
  for (DType dtype : {DType::f32, DType::f64}) {
    for (size_t c = 0; c < cases.size(); ++c) {
      INFO("case " << c << ", dtype " << dtype_name(dtype));
      Tensor p = make_param(kInit, dtype);
      Adam opt({p}, cases[c]);
      run_steps(opt, p, 0, 3);
      check_abs_close(values(p), adam_reference(cases[c], false, 3));
      CHECK(opt.state(0).step == 3);
      CHECK(opt.kind() == "Adam");
    }
  }
}

TEST_CASE("AdamW matches the recurrence with decoupled weight decay", "[optim]") {
  const AdamWOptions w = {.lr = 0.02, .beta1 = 0.85, .beta2 = 0.99, .eps = 1e-7, .weight_decay = 0.3};
  const AdamOptions as_adam = {.lr = w.lr, .beta1 = w.beta1, .beta2 = w.beta2, .eps = w.eps,
                               .weight_decay = w.weight_decay};
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO("dtype " << dtype_name(dtype));
    Tensor p = make_param(kInit, dtype);
    AdamW opt({p}, w);
    run_steps(opt, p, 0, 3);
    const Vec expected = adam_reference(as_adam, true, 3);
    check_abs_close(values(p), expected);
    // Decoupled and L2 weight decay differ visibly here.
    const Vec l2 = adam_reference(as_adam, false, 3);
    CHECK(std::abs(expected[2] - l2[2]) > 1e-4);
    CHECK(opt.kind() == "AdamW");
  }
}

TEST_CASE("zero_grad drops gradients or fills them with zeros", "[optim]") {
  Tensor a = make_param(kInit, DType::f32);
  Tensor b = make_param(kInit, DType::f32);
  SGD opt({a, b}, {.lr = 0.1});
  set_grad(a, grad_at(0));
  set_grad(b, grad_at(1));
  opt.zero_grad(false);
  REQUIRE(a.grad().defined());
  REQUIRE(b.grad().defined());
  check_abs_close(values(a.grad()), Vec(6, 0.0), 0.0);
  check_abs_close(values(b.grad()), Vec(6, 0.0), 0.0);
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
  CHECK_FALSE(b.grad().defined());
  opt.zero_grad();  // nothing to drop: no error
}

TEST_CASE("parameters without a gradient are skipped and get no state", "[optim]") {
  Tensor a = make_param(kInit, DType::f32);
  Tensor b = make_param(kInit, DType::f32);
  Adam opt({a, b}, {.lr = 0.01});
  run_steps(opt, a, 0, 2);
  check_abs_close(values(a), adam_reference({.lr = 0.01}, false, 2));
  CHECK(values(b) == values(make_param(kInit, DType::f32)));  // untouched, bit for bit
  CHECK(opt.state(0).step == 2);
  CHECK(opt.state(1).step == 0);
  CHECK(opt.state(1).tensors.empty());
}

TEST_CASE("state_dict after two steps loaded into a fresh optimizer continues like three straight steps", "[optim]") {
  auto check_round_trip = [](auto make_opt, const Vec& expected) {
    Tensor p1 = make_param(kInit, DType::f32);
    auto opt1 = make_opt(p1);
    run_steps(*opt1, p1, 0, 2);
    const OptimizerState saved = opt1->state_dict();
    REQUIRE(saved.params.size() == 1);
    CHECK(saved.params[0].step == 2);

    Tensor p2 = make_param(values(p1), DType::f32);
    auto opt2 = make_opt(p2);
    opt2->load_state_dict(saved);
    CHECK(opt2->state(0).step == 2);
    // The loaded state is a copy, not the saved handles.
    for (const auto& [name, t] : opt2->state(0).tensors) {
      CHECK_FALSE(t.is_same(saved.params[0].tensors.at(name)));
    }
    run_steps(*opt2, p2, 2, 1);
    run_steps(*opt1, p1, 2, 1);
    CHECK(values(p2) == values(p1));
    check_abs_close(values(p2), expected);
  };
  SECTION("Adam") {
    const AdamOptions o = {.lr = 0.01, .weight_decay = 0.1};
    check_round_trip([&](const Tensor& p) { return std::make_unique<Adam>(std::vector<Tensor>{p}, o); },
                     adam_reference(o, false, 3));
  }
  SECTION("AdamW") {
    const AdamWOptions o = {.lr = 0.01, .weight_decay = 0.1};
    const AdamOptions as_adam = {.lr = 0.01, .weight_decay = 0.1};
    check_round_trip([&](const Tensor& p) { return std::make_unique<AdamW>(std::vector<Tensor>{p}, o); },
                     adam_reference(as_adam, true, 3));
  }
  SECTION("SGD with momentum") {
    const SGDOptions o = {.lr = 0.05, .momentum = 0.9, .dampening = 0.1};
    check_round_trip([&](const Tensor& p) { return std::make_unique<SGD>(std::vector<Tensor>{p}, o); },
                     sgd_reference(o, 3));
  }
}

TEST_CASE("load_state_dict refuses mismatched kinds, counts, names, shapes and dtypes", "[optim]") {
  Tensor p = make_param(kInit, DType::f32);
  Adam adam({p}, {.lr = 0.01});
  run_steps(adam, p, 0, 1);
  const OptimizerState good = adam.state_dict();

  Tensor q = make_param(kInit, DType::f32);
  SGD sgd({q}, {.lr = 0.1, .momentum = 0.9});
  CHECK_THROWS_WITH(sgd.load_state_dict(good), Catch::Contains("state of a Adam optimizer"));

  Adam fresh({make_param(kInit, DType::f32)}, {.lr = 0.01});
  OptimizerState two = good;
  two.params.push_back({});
  CHECK_THROWS_WITH(fresh.load_state_dict(two), Catch::Contains("state for 2 parameters, the optimizer has 1"));

  OptimizerState shape = good;
  shape.params[0].tensors["exp_avg"] = zeros({6});
  CHECK_THROWS_WITH(fresh.load_state_dict(shape), Catch::Contains("state 'exp_avg' of parameter 0 is [6]"));

  OptimizerState dtype = good;
  dtype.params[0].tensors["exp_avg_sq"] = zeros({2, 3}, {.dtype = DType::f64});
  CHECK_THROWS_WITH(fresh.load_state_dict(dtype), Catch::Contains("f64"));

  OptimizerState name = good;
  name.params[0].tensors.erase("exp_avg");
  name.params[0].tensors["momentum"] = zeros({2, 3});
  CHECK_THROWS_WITH(fresh.load_state_dict(name), Catch::Contains("lacks state 'exp_avg'"));

  // A failed load leaves the optimizer untouched.
  CHECK(fresh.state(0).step == 0);
  CHECK(fresh.state(0).tensors.empty());
}

TEST_CASE("Adam state is counted under optimizer_state as twice the parameter bytes", "[optim]") {
  const Device cpu = Device::cpu();
  Tensor p = empty({16, 8}, {.tag = MemoryTag::param});
  p.fill_(0.5);
  p.requires_grad_();
  const int64_t param_bytes = static_cast<int64_t>(p.nbytes());
  const int64_t before = memory_stats(cpu)[MemoryTag::optimizer_state].current_bytes;
  {
    Adam opt({p}, {.lr = 0.01});
    CHECK(memory_stats(cpu)[MemoryTag::optimizer_state].current_bytes == before);  // lazy
    p.set_grad(full({16, 8}, 0.25));
    opt.step();
    CHECK(memory_stats(cpu)[MemoryTag::optimizer_state].current_bytes - before == 2 * param_bytes);
    opt.step();  // no further state
    CHECK(memory_stats(cpu)[MemoryTag::optimizer_state].current_bytes - before == 2 * param_bytes);
  }
  CHECK(memory_stats(cpu)[MemoryTag::optimizer_state].current_bytes == before);
}

TEST_CASE("optimizers refuse bad parameters and hyperparameters with clear errors", "[optim]") {
  CHECK_THROWS_WITH(SGD(std::vector<Tensor>{}, {.lr = 0.1}), Catch::Contains("empty parameter list"));
  CHECK_THROWS_WITH(SGD({ones({2})}, {.lr = 0.1}), Catch::Contains("does not require grad"));
  Tensor leaf = ones({2});
  leaf.requires_grad_();
  const Tensor non_leaf = mul(leaf, 2.0);
  CHECK_THROWS_WITH(SGD({non_leaf}, {.lr = 0.1}), Catch::Contains("not a leaf"));
  CHECK_THROWS_WITH(SGD({leaf, leaf}, {.lr = 0.1}), Catch::Contains("appears twice"));
  CHECK_THROWS_WITH(SGD({Tensor()}, {.lr = 0.1}), Catch::Contains("undefined"));
  Tensor half = zeros({2}, {.dtype = DType::bf16});
  half.requires_grad_();
  CHECK_THROWS_WITH(Adam({half}, {}), Catch::Contains("only f32 and f64"));
  CHECK_THROWS_WITH(SGD({leaf}, {.lr = -1.0}), Catch::Contains("lr must be finite and >= 0"));
  CHECK_THROWS_WITH(SGD({leaf}, {.lr = 0.1, .nesterov = true}), Catch::Contains("nesterov needs momentum > 0"));
  CHECK_THROWS_WITH(SGD({leaf}, {.lr = 0.1, .momentum = -0.5}), Catch::Contains("momentum"));
  CHECK_THROWS_WITH(Adam({leaf}, {.beta1 = 1.0}), Catch::Contains("beta1 must be in [0, 1)"));
  CHECK_THROWS_WITH(AdamW({leaf}, {.beta2 = -0.1}), Catch::Contains("AdamW: beta2"));
  CHECK_THROWS_WITH(Adam({leaf}, {.weight_decay = -1.0}), Catch::Contains("weight_decay"));
  SGD ok({leaf}, {.lr = 0.1});
  CHECK_THROWS_AS(ok.set_lr(std::nan("")), Error);
  CHECK_THROWS_WITH(ok.state(1), Catch::Contains("out of range"));
}

namespace {

// Runs `steps` steps of `opt` on the parameters `ps`, feeding each grad_at(t0 + t).
void run_group_steps(Optimizer& opt, const std::vector<Tensor>& ps, int t0, int steps) {
  for (int t = t0; t < t0 + steps; ++t) {
    for (const Tensor& p : ps) set_grad(p, grad_at(t));
    opt.step();
  }
}

}  // namespace

TEST_CASE("AdamW param groups each follow the recurrence with their own hyperparameters", "[optim]") {
  const AdamWOptions base = {.lr = 0.02, .beta1 = 0.85, .beta2 = 0.99, .eps = 1e-7, .weight_decay = 0.3};
  const AdamOptions as_adam = {.lr = 0.02, .beta1 = 0.85, .beta2 = 0.99, .eps = 1e-7, .weight_decay = 0.3};
  const AdamOptions own = {.lr = 0.05, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.0};
  for (const bool fused : {true, false}) {
    for (DType dtype : {DType::f32, DType::f64}) {
      INFO("fused " << fused << ", dtype " << dtype_name(dtype));
      Tensor a = make_param(kInit, dtype), b = make_param(kInit, dtype), c = make_param(kInit, dtype);
      AdamWOptions options = base;
      options.fused = fused;
      AdamW opt({{{a}, {.lr = own.lr, .weight_decay = own.weight_decay, .beta1 = own.beta1, .beta2 = own.beta2,
                        .eps = own.eps}},
                 {{b, c}}},
                options);
      REQUIRE(opt.num_groups() == 2);
      CHECK(opt.group_of(0) == 0);
      CHECK(opt.group_of(2) == 1);
      run_group_steps(opt, {a, b, c}, 0, 3);
      check_abs_close(values(a), adam_reference(own, true, 3));
      check_abs_close(values(b), adam_reference(as_adam, true, 3));
      check_abs_close(values(c), adam_reference(as_adam, true, 3));
    }
  }
}

TEST_CASE("SGD and Adam param groups follow their own recurrences and state", "[optim]") {
  const SGDOptions plain = {.lr = 0.1, .weight_decay = 0.2};
  const SGDOptions momentum = {.lr = 0.05, .momentum = 0.9, .dampening = 0.25, .weight_decay = 0.2};
  for (const bool fused : {true, false}) {
    INFO("fused " << fused);
    Tensor a = make_param(kInit, DType::f32), b = make_param(kInit, DType::f32);
    SGDOptions options = plain;
    options.fused = fused;
    SGD opt({{{a}}, {{b}, {.lr = momentum.lr, .momentum = momentum.momentum, .dampening = momentum.dampening}}},
            options);
    run_group_steps(opt, {a, b}, 0, 3);
    check_abs_close(values(a), sgd_reference(plain, 3));
    check_abs_close(values(b), sgd_reference(momentum, 3));
    CHECK(opt.state(0).tensors.empty());  // no momentum in group 0: no buffer
    CHECK(opt.state(1).tensors.size() == 1);
  }
  Tensor a = make_param(kInit, DType::f64), b = make_param(kInit, DType::f64);
  const AdamOptions l2 = {.lr = 0.01, .weight_decay = 0.1};
  Adam adam({{{a}}, {{b}, {.weight_decay = 0.0}}}, l2);
  run_group_steps(adam, {a, b}, 0, 3);
  check_abs_close(values(a), adam_reference(l2, false, 3));
  check_abs_close(values(b), adam_reference({.lr = 0.01}, false, 3));
}

TEST_CASE("an optimizer built with lr 0 follows the lr a schedule sets later", "[optim]") {
  // 0 is the usual lr to build with when a schedule sets it before the first step:
  // the group lrs must not become 0 * (lr / 0), NaN.
  Tensor a = make_param(kInit, DType::f32), b = make_param(kInit, DType::f32);
  AdamW opt({{{a}}, {{b}, {.weight_decay = 0.0}}}, {.lr = 0.0});
  apply_lr_schedule(opt, constant_lr(0.05), 0);
  CHECK(opt.group_lr(0) == 0.05);
  CHECK(opt.group_lr(1) == 0.05);
  Tensor c = make_param(kInit, DType::f32);
  AdamW reference({c}, {.lr = 0.05});  // the same parameter, built with the lr directly
  set_grad(a, grad_at(0));
  set_grad(c, grad_at(0));
  opt.step();
  reference.step();
  CHECK(values(a) == values(c));
}

TEST_CASE("an lr schedule scales every param group by its lr ratio", "[optim]") {
  Tensor a = make_param(kInit, DType::f32), b = make_param(kInit, DType::f32);
  AdamW opt({{{a}}, {{b}, {.lr = 0.3}}}, {.lr = 0.1});
  CHECK(opt.group_lr(0) == 0.1);
  CHECK(opt.group_lr(1) == 0.3);  // exactly as given until the lr changes
  apply_lr_schedule(opt, constant_lr(0.05), 0);
  CHECK(opt.lr() == 0.05);
  CHECK(opt.group_lr(0) == Approx(0.05).epsilon(1e-15));
  CHECK(opt.group_lr(1) == Approx(0.15).epsilon(1e-15));
  // The group's update uses its scaled lr: one step of b at lr 0.15 (the first
  // Adam step moves each element by lr, less weight decay, up to eps).
  set_grad(b, grad_at(0));
  const Vec before = values(b);
  opt.step();
  const Vec after = values(b);
  const Vec grad = grad_at(0);
  for (size_t i = 0; i < before.size(); ++i) {
    if (std::abs(grad[i]) < 1e-3) continue;  // moves by about lr * |g| / eps instead
    const double decayed = before[i] * (1.0 - 0.15 * 0.01);
    CHECK(std::abs(decayed - after[i]) == Approx(0.15).epsilon(1e-5));
  }
  CHECK_THROWS_WITH(opt.group_lr(2), Catch::Contains("group 2 out of range for 2 groups"));
}

TEST_CASE("param group state round-trips and load refuses a different grouping", "[optim]") {
  const AdamWOptions o = {.lr = 0.01, .weight_decay = 0.1};
  auto make = [&](const Tensor& a, const Tensor& b) {
    return std::make_unique<AdamW>(std::vector<ParamGroup>{{{a}, {.weight_decay = 0.0}}, {{b}, {.lr = 0.02}}}, o);
  };
  Tensor a1 = make_param(kInit, DType::f32), b1 = make_param(kInit, DType::f32);
  auto opt1 = make(a1, b1);
  run_group_steps(*opt1, {a1, b1}, 0, 2);
  const OptimizerState saved = opt1->state_dict();
  CHECK(saved.group_sizes == std::vector<size_t>{1, 1});

  Tensor a2 = make_param(values(a1), DType::f32), b2 = make_param(values(b1), DType::f32);
  auto opt2 = make(a2, b2);
  opt2->load_state_dict(saved);
  run_group_steps(*opt2, {a2, b2}, 2, 1);
  check_abs_close(values(a2), adam_reference({.lr = 0.01}, true, 3));
  check_abs_close(values(b2), adam_reference({.lr = 0.02, .weight_decay = 0.1}, true, 3));

  Tensor a3 = make_param(kInit, DType::f32), b3 = make_param(kInit, DType::f32);
  AdamW one_group({a3, b3}, o);
  CHECK_THROWS_WITH(one_group.load_state_dict(saved),
                    Catch::Contains("param groups of [1, 1] parameters, the optimizer has [2]"));
}

TEST_CASE("param groups refuse options their optimizer lacks, bad values and shared parameters", "[optim]") {
  Tensor a = make_param(kInit, DType::f32), b = make_param(kInit, DType::f32);
  CHECK_THROWS_WITH(SGD({{{a}}, {{b}, {.beta1 = 0.5}}}, {.lr = 0.1}),
                    Catch::Contains("SGD param group 1: sets beta1, which SGD does not have"));
  CHECK_THROWS_WITH(AdamW({{{a}, {.momentum = 0.9}}}, {}), Catch::Contains("sets momentum, which AdamW does not have"));
  CHECK_THROWS_WITH(AdamW({{{a}}, {{b}, {.beta1 = 1.5}}}, {}),
                    Catch::Contains("AdamW param group 1: beta1 must be in [0, 1), got 1.5"));
  CHECK_THROWS_WITH(SGD({{{a}}, {{b}, {.momentum = -1.0}}}, {.lr = 0.1}), Catch::Contains("SGD param group 1: momentum"));
  CHECK_THROWS_WITH(AdamW({{{a}}, {{a, b}}}, {}), Catch::Contains("appears twice (also at 0), in groups 0 and 1"));
  CHECK_THROWS_WITH(AdamW({{{a}}, {std::vector<Tensor>{}}}, {}), Catch::Contains("AdamW param group 1: got an empty"));
  CHECK_THROWS_WITH(AdamW({{{a}}, {{b}, {.lr = 0.1}}}, {.lr = 0.0}), Catch::Contains("while the optimizer's lr is 0"));
  CHECK_THROWS_WITH(AdamW(std::vector<ParamGroup>{}, {}), Catch::Contains("no parameter groups"));
}

TEST_CASE("weight_decay_groups decays matrices and spares biases", "[optim]") {
  nn::Linear linear(3, 4);
  const auto groups = weight_decay_groups(linear.parameters(), 0.1);
  REQUIRE(groups.size() == 2);
  REQUIRE(groups[0].params.params.size() == 1);
  CHECK(groups[0].params.params[0].data().dim() == 2);  // the weight
  CHECK(groups[0].options.weight_decay == 0.1);
  REQUIRE(groups[1].params.params.size() == 1);
  CHECK(groups[1].params.params[0].data().dim() == 1);  // the bias
  CHECK(groups[1].options.weight_decay == 0.0);
  nn::Linear no_bias(3, 4, {.bias = false});
  CHECK(weight_decay_groups(no_bias.parameters(), 0.1).size() == 1);
}
