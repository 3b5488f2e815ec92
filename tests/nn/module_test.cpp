// nn::Module: naming, slots, state dicts, hooks, devices and meta-device
// initialisation; and a small model that learns (with a hand-written SGD step).
#include "dtr/base/error.h"
#include "dtr/nn/activation.h"
#include "dtr/nn/container.h"
#include "dtr/nn/linear.h"
#include "dtr/nn/simple_model.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/memory_stats.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/ops/reduce.h"
#include "dtr/tensor/random.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace dtr;
using namespace dtr::nn;

namespace {
template <class T>
std::vector<std::string> names_of(const std::vector<std::pair<std::string, T>>& named) {
  std::vector<std::string> out;
  for (const auto& [n, t] : named) out.push_back(n);
  return out;
}
}  // namespace

TEST_CASE("parameters and modules have dotted names in registration order", "[nn][module]") {
  auto seq = std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
      std::make_shared<Linear>(4, 3), std::make_shared<ReLU>(), std::make_shared<Linear>(3, 2, LinearOptions{.bias = false})});
  CHECK(names_of(seq->named_parameters()) == std::vector<std::string>{"0.weight", "0.bias", "2.weight"});
  CHECK(seq->num_parameters() == 4 * 3 + 3 + 3 * 2);
  CHECK(seq->num_local_parameters() == 4 * 3 + 3 + 3 * 2);  // nothing is sharded
  std::vector<std::string> modules;
  for (auto& [n, m] : seq->named_modules()) modules.push_back(n + ":" + m->type_name());
  CHECK(modules == std::vector<std::string>{":Sequential", "0:Linear", "1:ReLU", "2:Linear"});
  for (const Tensor& p : seq->parameters()) {
    CHECK(p.requires_grad());
    CHECK(p.is_leaf());
    CHECK(p.storage().tag() == MemoryTag::param);
  }
  CHECK_THROWS_WITH((*seq)[0].parameter("kernel"), Catch::Contains("Linear: no parameter named 'kernel' (it has: weight, bias)"));
  CHECK_THROWS_WITH((*seq)[5], Catch::Contains("index 5 out of range for 3 modules"));
}

TEST_CASE("a module's forward allocates activations, unless its caller set another tag", "[nn][module]") {
  auto mlp = std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
      std::make_shared<Linear>(8, 16), std::make_shared<ReLU>(), std::make_shared<Linear>(16, 2)});
  const Tensor x = randn({4, 8});
  auto grown = [](const MemoryStats& before, MemoryTag tag) {
    return memory_stats(Device::cpu())[tag].current_bytes - before[tag].current_bytes;
  };
  const MemoryStats before = memory_stats(Device::cpu());
  Tensor y = (*mlp)(x);
  // Alive now: the output (4x2) and what backward needs, the ReLU's 4x16 output
  // (the first Linear's output is freed); nothing is counted as "other".
  CHECK(grown(before, MemoryTag::activation) == (4 * 2 + 4 * 16) * 4);
  CHECK(grown(before, MemoryTag::other) == 0);
  {
    MemoryTagGuard tag(MemoryTag::comm_buffer);
    const MemoryStats again = memory_stats(Device::cpu());
    Tensor z = (*mlp)(x);
    CHECK(grown(again, MemoryTag::comm_buffer) == (4 * 2 + 4 * 16) * 4);
    CHECK(grown(again, MemoryTag::activation) == 0);
  }
}

namespace {

// A user's module that names no device: its parameters follow the default device.
class DeviceFreeModule : public Module {
 public:
  std::string type_name() const override { return "DeviceFreeModule"; }
  Tensor forward(const Tensor& x) override { return add(mul(x, scale_), (*proj_)(x)); }

 private:
  Parameter scale_ = register_parameter("scale", randn({4}));
  std::shared_ptr<Linear> proj_ = register_module("proj", std::make_shared<Linear>(4, 4));
};

}  // namespace

TEST_CASE("a scoped default device places what names no device: factories, layers, a user's module", "[nn][device]") {
  CHECK(default_device() == Device::cpu());
  {
    DefaultDeviceGuard meta(Device::meta());
    CHECK(empty({2, 3}).device().is_meta());
    CHECK(randn({2}).device().is_meta());
    CHECK(zeros({2}, {.device = Device::cpu()}).device().is_cpu());  // an explicit device wins
    {
      DefaultDeviceGuard cpu(Device::cpu());  // nested: the innermost scope counts
      CHECK(zeros({2}).device().is_cpu());
    }
    CHECK(default_device() == Device::meta());
    auto user = std::make_shared<DeviceFreeModule>();
    for (auto& [name, p] : user->named_parameters()) {
      INFO(name);
      CHECK(p->device().is_meta());
    }
    TransformerConfig c;  // its device is unset: the scope's when the model is built
    c.vocab_size = 16;
    c.dim = 8;
    c.n_layers = 1;
    c.n_heads = 2;
    auto transformer = std::make_shared<Transformer>(c);
    for (auto& [name, p] : transformer->named_parameters()) {
      INFO(name);
      CHECK(p->device().is_meta());
    }
    user->to_empty(Device::cpu());  // materialised as a meta-built model is
    for (auto& [name, p] : user->named_parameters()) CHECK(p->device().is_cpu());
  }
  CHECK(default_device() == Device::cpu());
  CHECK(empty({1}).device().is_cpu());
}

TEST_CASE("Linear computes x W^T + b and its gradients", "[nn][module]") {
  Linear lin(3, 2);
  NoGradGuard init;
  lin.parameter("weight").copy_(from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  lin.parameter("bias").copy_(from_vector<float>({0.5f, -1}));
  autograd::EnableGradGuard grad_on;
  Tensor x = from_vector<float>({1, 0, -1, 2, 1, 0}, {2, 3});
  Tensor y = lin(x);
  CHECK(y.to_vector<float>() == std::vector<float>{1 - 3 + 0.5f, 4 - 6 - 1, 2 + 2 + 0.5f, 8 + 5 - 1});
  sum(y).backward();
  // dW[o][i] = sum over rows of x[r][i]; db[o] = rows.
  CHECK(lin.parameter("weight").grad().to_vector<float>() == std::vector<float>{3, 1, -1, 3, 1, -1});
  CHECK(lin.parameter("bias").grad().to_vector<float>() == std::vector<float>{2, 2});
  CHECK_THROWS_WITH(lin(zeros({2, 4})), Catch::Contains("Linear: expected input with last dim 3 (in_features), got shape [2, 4]"));
}

TEST_CASE("forward hooks see and replace inputs and outputs, in order", "[nn][module][hooks]") {
  Linear lin(2, 2, {.bias = false});
  std::vector<std::string> log;
  int a = lin.register_forward_pre_hook([&](Module& m, const Tensor& x) {
    log.push_back("pre:" + m.type_name());
    return x * 2.0;
  });
  Tensor seen_input;
  lin.register_forward_hook([&](Module&, const Tensor& in, const Tensor& out) {
    log.push_back("post");
    seen_input = in;
    return out + 100.0;
  });
  NoGradGuard no_grad;
  lin.parameter("weight").copy_(from_vector<float>({1, 0, 0, 1}, {2, 2}));
  Tensor y = lin(from_vector<float>({1, 2}, {1, 2}));
  CHECK(y.to_vector<float>() == std::vector<float>{102, 104});
  CHECK(log == std::vector<std::string>{"pre:Linear", "post"});
  CHECK(seen_input.to_vector<float>() == std::vector<float>{2, 4});  // the replaced input
  lin.remove_hook(a);
  CHECK(lin(from_vector<float>({1, 2}, {1, 2})).to_vector<float>() == std::vector<float>{101, 102});
  CHECK(lin.forward(from_vector<float>({1, 2}, {1, 2})).to_vector<float>() == std::vector<float>{1, 2});
}

TEST_CASE("a post-backward hook on a module's input runs after the module's whole backward", "[nn][hooks]") {
  Linear lin(3, 3);
  std::vector<std::string> log;
  lin.register_forward_pre_hook([&](Module&, const Tensor& x) {
    return autograd::call_after_backward(x, [&] { log.push_back("post-backward"); });
  });
  lin.parameter("weight").register_hook([&](const Tensor&) {
    log.push_back("weight grad");
    return Tensor();
  });
  Tensor x = randn({4, 3}).requires_grad_();
  Tensor y = lin(lin(x));  // the module runs twice: two post-backward calls
  sum(y).backward();
  // The weight's gradient is complete (both uses summed) once the inner call's
  // backward is done, so its hook fires once, between the two post-backward calls.
  CHECK(log == std::vector<std::string>{"post-backward", "weight grad", "post-backward"});
  CHECK_THROWS_WITH(autograd::call_after_backward(zeros({2}), [] {}), Catch::Contains("does not require grad"));
}

namespace {

// (a, b) -> (a * b, a + b).
struct ProductAndSum : Module {
  std::string type_name() const override { return "ProductAndSum"; }
  Tensors forward_multi(const Tensors& in) override {
    DTR_CHECK(in.size() == 2, "ProductAndSum takes 2 inputs, got {}", in.size());
    return {mul(in[0], in[1]), add(in[0], in[1])};
  }
};

// x -> (x, 2x).
struct AndTwice : Module {
  std::string type_name() const override { return "AndTwice"; }
  Tensors forward_multi(const Tensors& in) override { return {in.at(0), mul(in.at(0), Scalar(2.0))}; }
};

struct NoForward : Module {
  std::string type_name() const override { return "NoForward"; }
};

std::vector<float> floats(const Tensor& t) { return t.to_vector<float>(); }

}  // namespace

TEST_CASE("a module takes and returns several tensors, and its hooks see and replace them all", "[nn][module][hooks]") {
  ProductAndSum m;
  std::vector<std::string> log;
  m.register_forward_pre_hook([&](Module&, const Tensors& in) {
    log.push_back("pre:" + std::to_string(in.size()));
    return Tensors{mul(in[0], Scalar(2.0)), in[1]};
  });
  m.register_forward_hook([&](Module&, const Tensors& in, const Tensors& out) {
    log.push_back("post:" + std::to_string(in.size()) + "->" + std::to_string(out.size()));
    CHECK(floats(in[0]) == std::vector<float>{2, 4});  // the replaced input
    return Tensors{};                                   // keeps the outputs
  });
  Tensor a = from_vector<float>({1, 2}, {2}), b = from_vector<float>({3, 4}, {2});
  Tensors out = m(a, b);
  // a is doubled by the pre-hook: (2, 4) * (3, 4) and (2, 4) + (3, 4).
  REQUIRE(out.size() == 2);
  CHECK(floats(out[0]) == std::vector<float>{6, 16});
  CHECK(floats(out[1]) == std::vector<float>{5, 8});
  CHECK(floats(m.call({a, b})[1]) == std::vector<float>{5, 8});
  CHECK(log == std::vector<std::string>{"pre:2", "post:2->2", "pre:2", "post:2->2"});
}

TEST_CASE("calling a module with the wrong number of tensors, or hooks of one tensor, says what to do",
          "[nn][module][hooks]") {
  Tensor a = from_vector<float>({1, 2}, {2}), b = from_vector<float>({3, 4}, {2});
  Linear lin(2, 2);
  CHECK_THROWS_WITH(lin(a, b), Catch::Contains("Linear: called with 2 inputs, but it takes one") &&
                                   Catch::Contains("forward_multi"));
  AndTwice twice;
  CHECK_THROWS_WITH(twice(a), Catch::Contains("AndTwice: returned 2 tensors where one was expected"));
  CHECK(floats(twice.call({a})[1]) == std::vector<float>{2, 4});
  NoForward none;
  CHECK_THROWS_WITH(none(a), Catch::Contains("NoForward: has no forward"));

  ProductAndSum m;
  int pre = m.register_forward_pre_hook([](Module&, const Tensor& x) { return x; });
  CHECK_THROWS_WITH(m(a, b), Catch::Contains("ProductAndSum: a one-tensor forward pre-hook is registered, but the "
                                             "module was called with 2 inputs"));
  m.remove_hook(pre);
  m.register_forward_hook([](Module&, const Tensor&, const Tensor& y) { return y; });
  CHECK_THROWS_WITH(m(a, b), Catch::Contains("a one-tensor forward hook is registered, but the module took 2 "
                                             "inputs and returned 2 outputs"));
}

TEST_CASE("call_after_backward over several tensors runs once, after the backward of all of them", "[nn][hooks]") {
  Tensor a = from_vector<float>({1, 2}, {2}).requires_grad_();
  Tensor b = from_vector<float>({3, 4}, {2}).requires_grad_();
  Tensor c = from_vector<float>({5, 6}, {2});  // needs no gradient: passed on as it is
  std::vector<std::string> log;
  Tensors wrapped = autograd::call_after_backward(Tensors{a, b, c}, [&] { log.push_back("after"); });
  CHECK(wrapped[2].is_same(c));
  a.register_hook([&](const Tensor&) {
    log.push_back("a grad");
    return Tensor();
  });
  sum(mul(mul(wrapped[0], wrapped[1]), wrapped[2])).backward();
  CHECK(log == std::vector<std::string>{"after", "a grad"});
  // d/da sum(a b c) = b c = (15, 24); d/db = a c = (5, 12).
  CHECK(floats(a.grad()) == std::vector<float>{15, 24});
  CHECK(floats(b.grad()) == std::vector<float>{5, 12});
  CHECK_THROWS_WITH(autograd::call_after_backward(Tensors{c}, [] {}),
                    Catch::Contains("none of the 1 tensors requires grad"));
}

TEST_CASE("state_dict round-trips and load_state_dict names what is wrong", "[nn][module]") {
  manual_seed(1);
  SimpleModel a(8, 6, 3);
  SimpleModel b(8, 6, 3);
  StateDict sd = a.state_dict();
  CHECK(sd.size() == 4);
  b.load_state_dict(sd);
  for (auto& [name, t] : b.state_dict()) CHECK(t.to_vector<float>() == sd.at(name).to_vector<float>());
  StateDict partial = sd;
  partial.erase("fc1.bias");
  partial["fc3.weight"] = zeros({1});
  CHECK_THROWS_WITH(b.load_state_dict(partial), Catch::Contains("missing keys [fc1.bias], unexpected keys [fc3.weight]"));
  b.load_state_dict({{"fc2.bias", full({3}, 7.0)}}, /*strict=*/false);
  CHECK(b.state_dict().at("fc2.bias").to_vector<float>() == std::vector<float>{7, 7, 7});
  CHECK_THROWS_WITH(b.load_state_dict({{"fc2.bias", zeros({4})}}, false),
                    Catch::Contains("shape mismatch for fc2.bias (checkpoint [4], module [3])"));
}

TEST_CASE("meta-device models materialise with to_empty and reset_parameters like eager ones", "[nn][module][meta]") {
  manual_seed(42);
  SimpleModel eager(16, 8, 4);
  const MemoryStats before = memory_stats(Device::cpu());
  SimpleModel lazy(16, 8, 4, {.device = Device::meta()});
  CHECK(memory_stats(Device::cpu()).total.num_allocations == before.total.num_allocations);
  for (const Tensor& p : lazy.parameters()) CHECK(p.device().is_meta());
  lazy.to_empty(Device::cpu());
  const int64_t param_bytes = (16 * 8 + 8 + 8 * 4 + 4) * 4;
  CHECK(memory_stats(Device::cpu())[MemoryTag::param].current_bytes -
            before[MemoryTag::param].current_bytes == param_bytes);
  manual_seed(42);
  lazy.reset_parameters();
  auto e = eager.named_parameters(), l = lazy.named_parameters();
  REQUIRE(e.size() == l.size());
  for (size_t i = 0; i < e.size(); ++i) {
    CHECK(l[i].second->requires_grad());
    CHECK(l[i].second->to_vector<float>() == e[i].second->to_vector<float>());
  }
  lazy.to(DType::f64);
  for (const Tensor& p : lazy.parameters()) {
    CHECK(p.dtype() == DType::f64);
    CHECK(p.requires_grad());
  }
}

TEST_CASE("zero_grad clears or zeroes gradients, train and eval recurse", "[nn][module]") {
  SimpleModel m(4, 4, 2);
  sum(m(ones({3, 4}))).backward();
  for (const Tensor& p : m.parameters()) CHECK(p.grad().defined());
  m.zero_grad(/*set_to_none=*/false);
  for (const Tensor& p : m.parameters()) CHECK(max(abs(p.grad())).item() == 0.0);
  m.zero_grad();
  for (const Tensor& p : m.parameters()) CHECK_FALSE(p.grad().defined());
  m.eval();
  for (auto& [n, mod] : m.named_modules()) CHECK_FALSE(mod->is_training());
}

namespace {

// Trains SimpleModel on a fixed 4-class problem (class = which quarter of the
// plane the first two features fall in) with plain SGD; returns the loss curve
// and the final training accuracy.
std::pair<std::vector<double>, double> train_simple_model() {
  manual_seed(7);
  const int64_t n = 256, d = 8;
  Tensor x = randn({n, d});
  std::vector<float> xv = x.to_vector<float>();
  std::vector<int64_t> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[i] = (xv[i * d] > 0 ? 1 : 0) + (xv[i * d + 1] > 0 ? 2 : 0);
  Tensor y = from_vector<int64_t>(labels);
  SimpleModel model(d, 32, 4);
  std::vector<double> losses;
  for (int step = 0; step < 300; ++step) {
    Tensor loss = cross_entropy(model(x), y);
    losses.push_back(loss.item());
    model.zero_grad();
    loss.backward();
    NoGradGuard no_grad;
    for (const Tensor& p : model.parameters()) sub_(p, p.grad() * 0.5);
  }
  NoGradGuard no_grad;
  std::vector<int64_t> predicted = argmax(model(x), 1).to_vector<int64_t>();
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) correct += predicted[i] == labels[i];
  return {losses, static_cast<double>(correct) / n};
}

}  // namespace

TEST_CASE("SimpleModel learns a 4-class problem, bit for bit the same every run", "[nn][training]") {
  auto [losses, accuracy] = train_simple_model();
  INFO("first loss " << losses.front() << ", last loss " << losses.back() << ", accuracy " << accuracy);
  CHECK(losses.back() < 0.25 * losses.front());
  CHECK(accuracy >= 0.95);
  auto [again, accuracy_again] = train_simple_model();
  CHECK(again == losses);
  CHECK(accuracy_again == accuracy);
}

TEST_CASE("gradients accumulate over micro-batches when not zeroed", "[nn][training]") {
  manual_seed(4);
  SimpleModel model(6, 5, 3, {.dtype = DType::f64});
  Tensor x = randn({8, 6}, {.dtype = DType::f64});
  Tensor y = from_vector<int64_t>({0, 1, 2, 0, 1, 2, 0, 1});
  cross_entropy(model(x), y).backward();
  std::vector<std::vector<double>> full;
  for (const Tensor& p : model.parameters()) full.push_back(p.grad().to_vector<double>());
  model.zero_grad();
  // Two halves, each loss scaled by 1/2: the sum of their gradients is the full batch's.
  for (int64_t half = 0; half < 2; ++half) {
    (cross_entropy(model(x.narrow(0, 4 * half, 4)), y.narrow(0, 4 * half, 4)) * 0.5).backward();
  }
  auto params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<double> acc = params[i]->grad().to_vector<double>();
    for (size_t j = 0; j < acc.size(); ++j) CHECK(acc[j] == Approx(full[i][j]).epsilon(1e-12).margin(1e-14));
  }
}
