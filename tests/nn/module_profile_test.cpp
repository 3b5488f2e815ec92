// Module spans of the step profiler (dtr/nn/module.h, dtr/tensor/profiler.h): with the
// profiler on, every module call records a forward span and, when its output
// needs a gradient, a backward span that contains its children's backward spans
// (in reverse order of their forward); a module whose input needs no gradient
// (an embedding of token ids) closes its backward span at the end of the graph;
// under no-grad only forward spans; names from name_modules_for_profiling; and
// profiling changes no gradient.
#include "dtr/nn/container.h"
#include "dtr/nn/layers.h"
#include "dtr/nn/linear.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/reduce.h"
#include "dtr/tensor/profiler.h"
#include "dtr/tensor/random.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>

using namespace dtr;
using namespace dtr::nn;

namespace {

std::shared_ptr<Sequential> make_model() {
  manual_seed(3);
  return std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
      std::make_shared<Embedding>(10, 8), std::make_shared<Linear>(8, 8), std::make_shared<Linear>(8, 4)});
}

Tensor tokens() { return from_vector<int64_t>({1, 4, 2, 9, 0, 3}, {2, 3}); }

std::vector<std::vector<double>> grads_of(Module& m) {
  std::vector<std::vector<double>> out;
  for (auto& p : m.parameters()) out.push_back(p->grad().to(DType::f64).to_vector<double>());
  return out;
}

const profiler::Event& only(const std::vector<profiler::Event>& events, const std::string& cat, const std::string& name) {
  const profiler::Event* found = nullptr;
  int n = 0;
  for (const auto& e : events) {
    if (e.category == cat && e.name == name) {
      found = &e;
      ++n;
    }
  }
  INFO(cat << "/" << name);
  REQUIRE(n == 1);
  return *found;
}

}  // namespace

TEST_CASE("profiler module spans: forward and backward per module, children nested, gradients unchanged") {
  if (std::getenv("DTR_PROFILE") != nullptr) return;  // the test drives the profiler itself
  auto plain = make_model();
  sum(mul((*plain)(tokens()), Scalar(1.0))).backward();
  const auto want = grads_of(*plain);

  auto model = make_model();
  name_modules_for_profiling(*model);
  CHECK(std::string(model->profile_name()) == "Sequential");
  profiler::start({.print_summary = false});
  sum(mul((*model)(tokens()), Scalar(1.0))).backward();
  {
    autograd::NoGradGuard no_grad;
    (*model)(tokens());  // forward spans only
  }
  profiler::stop();
  CHECK(grads_of(*model) == want);

  const auto events = profiler::events();
  std::map<std::string, int> forwards;
  for (const auto& e : events) {
    if (e.category == "forward") ++forwards[e.name];
  }
  CHECK(forwards == std::map<std::string, int>{{"Sequential", 2}, {"0 (Embedding)", 2}, {"1 (Linear)", 2},
                                                {"2 (Linear)", 2}});
  const auto seq = only(events, "backward", "Sequential");
  const auto emb = only(events, "backward", "0 (Embedding)");
  const auto l1 = only(events, "backward", "1 (Linear)");
  const auto l2 = only(events, "backward", "2 (Linear)");
  // Backward runs last layer first; every child inside the Sequential's span.
  CHECK(seq.start_ns <= l2.start_ns);
  CHECK(l2.end_ns <= l1.start_ns);
  CHECK(l1.end_ns <= emb.start_ns);
  CHECK(emb.end_ns <= seq.end_ns);
  // Token ids need no gradient: the embedding and the Sequential end together, at the end of the graph.
  CHECK(emb.end_ns == seq.end_ns);
  for (const auto* e : {&seq, &emb, &l1, &l2}) CHECK(e->end_ns >= e->start_ns);
  profiler::clear();
}

namespace {

// (x, y) -> (lin(x) * y, lin(y)): two inputs, two outputs, one child.
struct TwoWay : Module {
  std::shared_ptr<Linear> lin = register_module("lin", std::make_shared<Linear>(4, 4));
  std::string type_name() const override { return "TwoWay"; }
  Tensors forward_multi(const Tensors& in) override { return {mul((*lin)(in.at(0)), in.at(1)), (*lin)(in.at(1))}; }
};

}  // namespace

TEST_CASE("profiler module spans of a module with two inputs and outputs: one span each, children inside") {
  if (std::getenv("DTR_PROFILE") != nullptr) return;  // the test drives the profiler itself
  manual_seed(4);
  TwoWay model;
  name_modules_for_profiling(model);
  Tensor x = randn({2, 4}).requires_grad_(), y = randn({2, 4}).requires_grad_();
  profiler::start({.print_summary = false});
  Tensors out = model(x, y);
  add(sum(out[0]), sum(out[1])).backward();
  profiler::stop();
  const auto events = profiler::events();
  only(events, "forward", "TwoWay");
  const auto outer = only(events, "backward", "TwoWay");
  int inner_backward = 0;
  for (const auto& e : events) {
    if (e.category != "backward" || e.name != "lin (Linear)") continue;
    ++inner_backward;
    CHECK(outer.start_ns <= e.start_ns);
    CHECK(e.end_ns <= outer.end_ns);
  }
  CHECK(inner_backward == 2);  // the child ran twice
  profiler::clear();
}
