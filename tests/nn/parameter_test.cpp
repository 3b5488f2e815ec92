// nn::Parameter in one process: a parameter's own tensor versus the tensor
// installed for compute, optimizers stepping the own tensor and following the
// slot, standalone parameters, and the refusals. Expected values are computed by
// hand (y = x * w for a one-weight Linear; SGD: w - lr * g).
#include "dtr/nn/linear.h"
#include "dtr/nn/optim/sgd.h"
#include "dtr/nn/parameter.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/reduce.h"

#include <catch2/catch.hpp>

#include <memory>
#include <vector>

using namespace dtr;
using namespace dtr::nn;

namespace {

// y = x * w: a Linear of one weight, no bias, in f64.
std::shared_ptr<Linear> scalar_linear(double w) {
  auto linear = std::make_shared<Linear>(1, 1, LinearOptions{.bias = false, .dtype = DType::f64});
  linear->parameter_handle("weight").data().detach().fill_(w);
  return linear;
}

double forward_value(Linear& linear, double x) {
  return (linear)(full({1, 1}, x, {.dtype = DType::f64})).item();
}

}  // namespace

TEST_CASE("an installed tensor is what the module computes with, while the optimizer steps the parameter itself",
          "[nn][parameter]") {
  auto linear = scalar_linear(2.0);
  const Parameter weight = linear->parameter_handle("weight");
  optim::SGD opt(linear->parameters(), {.lr = 0.5});

  Tensor installed = full({1, 1}, 10.0, {.dtype = DType::f64}).requires_grad_();
  linear->install_parameter("weight", installed);
  CHECK(forward_value(*linear, 3.0) == 30.0);            // computes with the installed 10
  CHECK(linear->parameter("weight").is_same(installed));  // by name: what is in use
  CHECK(weight.in_use().is_same(installed));
  CHECK(weight.data().item() == 2.0);  // the parameter itself is untouched

  weight.data().set_grad(full({1, 1}, 4.0, {.dtype = DType::f64}));
  opt.step();  // steps the own tensor while another is installed: 2 - 0.5 * 4
  CHECK(weight.data().item() == 0.0);
  CHECK(installed.item() == 10.0);

  linear->install_parameter("weight", std::nullopt);
  CHECK(forward_value(*linear, 3.0) == 0.0);
  CHECK(weight.in_use().is_same(weight.data()));

  linear->install_parameter("weight", Tensor());  // computes without it (an undefined tensor)
  CHECK_FALSE(weight.in_use().defined());
  CHECK(weight.data().defined());
  CHECK_THROWS_WITH(linear->install_parameter("bias", std::nullopt), Catch::Contains("no parameter named 'bias'"));
}

TEST_CASE("an optimizer built from model.parameters() follows the slot when to() replaces the tensor",
          "[nn][parameter]") {
  auto linear = std::make_shared<Linear>(1, 1, LinearOptions{.bias = false});
  linear->parameter_handle("weight").data().detach().fill_(1.0);
  optim::SGD opt(linear->parameters(), {.lr = 0.25});
  linear->to(DType::f64);  // a new tensor in the slot
  const Tensor& w = linear->parameter("weight");
  REQUIRE(w.dtype() == DType::f64);
  sum((*linear)(full({1, 1}, 2.0, {.dtype = DType::f64}))).backward();  // dL/dw = x = 2
  opt.step();
  CHECK(linear->parameter("weight").item() == 0.5);  // 1 - 0.25 * 2, on the module's new tensor
}

TEST_CASE("a standalone Parameter holds its tensor in a slot of its own", "[nn][parameter]") {
  Tensor t = zeros({3, 2});
  Parameter p(t);
  CHECK(p.defined());
  CHECK(p.data().is_same(t));
  CHECK(p.in_use().is_same(t));
  CHECK_FALSE(p.is_sharded());
  CHECK(p.sharding() == nullptr);
  CHECK(p.global_shape() == Shape{3, 2});
  CHECK(p.global_numel() == 6);
  CHECK(p.logical_slice().is_whole());
  CHECK_THROWS_WITH(p.as_dtensor(), Catch::Contains("not sharded"));
  Parameter copy = p;
  CHECK(copy.same_slot(p));
  CHECK_FALSE(Parameter(t).same_slot(p));  // same tensor, another slot
  CHECK_FALSE(Parameter().defined());
  CHECK_THROWS_WITH(Parameter().data(), Catch::Contains("names no parameter"));
}

TEST_CASE("set_parameter replaces the parameter tensor, and named_parameters gives handles to the slots",
          "[nn][parameter]") {
  auto first = std::make_shared<Linear>(2, 2);
  auto second = std::make_shared<Linear>(2, 2);
  second->set_parameter("weight", first->parameter("weight"));  // tie by tensor
  CHECK(second->parameter_handle("weight").data().is_same(first->parameter_handle("weight").data()));
  CHECK_FALSE(second->parameter_handle("weight").same_slot(first->parameter_handle("weight")));
  auto named = first->named_parameters();
  REQUIRE(named.size() == 2);
  CHECK(named[0].first == "weight");
  CHECK(named[0].second.same_slot(first->parameter_handle("weight")));
  CHECK_THROWS_WITH(first->parameter_handle("scale"), Catch::Contains("no parameter named 'scale'"));
}
