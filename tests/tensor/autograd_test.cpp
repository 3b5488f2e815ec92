// The autograd engine and its hooks, through view ops (whose backward needs no
// saved tensors) and a small custom node. Expected gradients are worked out by
// hand from index arithmetic.
#include "dtr/tensor/autograd/autograd_meta.h"
#include "dtr/tensor/autograd/engine.h"
#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/reduce.h"
#include "tests/support/gradcheck.h"
#include "tests/support/values.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace dtr;
using autograd::SavedTensor;
using dtr::testing::iota;

namespace {

// y = x * c with c saved for backward: exercises SavedTensor.
class ScaleBySaved final : public autograd::Node {
 public:
  explicit ScaleBySaved(const Tensor& c) : c_(c) {}
  std::string name() const override { return "ScaleBySaved"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    Tensor c = c_.unpack(*this);
    std::vector<double> g = grads[0].contiguous().to_vector<double>();
    std::vector<double> cv = c.contiguous().to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i) g[i] *= cv[i];
    return {from_vector<double>(g, grads[0].sizes())};
  }
  void release_saved() override { c_.release(); }

 private:
  SavedTensor c_;
};

Tensor scale_by_saved(const Tensor& x, const Tensor& c) {
  std::vector<double> xv = x.contiguous().to_vector<double>(), cv = c.contiguous().to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) xv[i] *= cv[i];
  Tensor out = from_vector<double>(xv, x.sizes());
  if (autograd::needs_grad({&x})) {
    autograd::set_history(std::make_shared<ScaleBySaved>(c), {&x}, {&out});
  }
  return out;
}

// A user's node that gets its gradients wrong: `count` of them, each of `shape`.
class WrongGradients final : public autograd::Node {
 public:
  WrongGradients(size_t count, Shape shape) : count_(count), shape_(std::move(shape)) {}
  std::string name() const override { return "WrongGradients"; }
  std::vector<Tensor> apply(std::vector<Tensor>) override {
    return std::vector<Tensor>(count_, ones(shape_, {.dtype = DType::f64}));
  }

 private:
  size_t count_;
  Shape shape_;
};

}  // namespace

TEST_CASE("a node returning the wrong number or shape of gradients gets an error saying what apply must return",
          "[autograd]") {
  Tensor a = iota({2, 3}, DType::f64).requires_grad_();
  Tensor b = iota({3}, DType::f64).requires_grad_();
  auto run = [&](size_t count, Shape shape) {
    Tensor out = zeros({2, 3}, {.dtype = DType::f64});
    autograd::set_history(std::make_shared<WrongGradients>(count, std::move(shape)), {&a, &b}, {&out});
    sum(out).backward();
  };
  CHECK_THROWS_WITH(run(1, {2, 3}), Catch::Contains("WrongGradients::apply returned 1 gradients for its 2 inputs") &&
                                        Catch::Contains("one per input given to set_history"));
  CHECK_THROWS_WITH(run(2, {2, 3}), Catch::Contains("gradient of shape [2, 3] for input 1, whose shape is [3]") &&
                                        Catch::Contains("autograd::sum_to"));
}

TEST_CASE("gradients flow back through chains of views to the leaf", "[autograd]") {
  Tensor x = iota({2, 3, 4}, DType::f64).requires_grad_();
  // y[c][i] = x[i][1][c] for c in 1..2 (a transposed, narrowed select).
  Tensor y = x.select(1, 1).t().narrow(0, 1, 2);  // [2, 2]
  REQUIRE(y.requires_grad());
  CHECK_FALSE(y.is_leaf());
  y.backward(from_vector<double>({1, 2, 3, 4}, {2, 2}));
  std::vector<double> expected(24, 0.0);
  // y[0][i] = x[i][1][1] gets 1 (i=0) and 2 (i=1); y[1][i] = x[i][1][2] gets 3 and 4.
  expected[0 * 12 + 1 * 4 + 1] = 1;
  expected[1 * 12 + 1 * 4 + 1] = 2;
  expected[0 * 12 + 1 * 4 + 2] = 3;
  expected[1 * 12 + 1 * 4 + 2] = 4;
  CHECK(x.grad().to_vector<double>() == expected);
  CHECK(x.grad().storage().tag() == MemoryTag::grad);
}

TEST_CASE("expand sums, permute and reshape invert, and gradients accumulate", "[autograd]") {
  Tensor x = from_vector<double>({1, 2, 3}, {3, 1}).requires_grad_();
  Tensor y = x.expand({2, 3, 4}).permute({2, 0, 1}).reshape({8, 3});
  y.backward(ones({8, 3}, {.dtype = DType::f64}));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{8, 8, 8});
  // A second backward adds to .grad().
  x.expand({3, 2}).backward(ones({3, 2}, {.dtype = DType::f64}));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{10, 10, 10});
  // A diamond: x used twice; both paths sum.
  Tensor z = iota({4}, DType::f64).requires_grad_();
  autograd::backward({z.narrow(0, 0, 3), z.slice(0, 1, 4, 2)},
                     {from_vector<double>({1, 1, 1}), from_vector<double>({10, 20})});
  CHECK(z.grad().to_vector<double>() == std::vector<double>{1, 11, 1, 20});
}

TEST_CASE("gradcheck agrees with the view backwards, including non-contiguous inputs", "[autograd]") {
  Tensor base = iota({5, 4}, DType::f64).t();  // non-contiguous [4, 5]
  Tensor x = base.detach().requires_grad_();
  CHECK(testing::gradcheck(
            [](const std::vector<Tensor>& in) {
              return in[0].slice(1, 0, 5, 2).unsqueeze(0).expand({3, 4, 3}).transpose(0, 2).clone();
            },
            {x}) == "");
  Tensor y = iota({2, 3}, DType::f64).requires_grad_();
  CHECK(testing::gradcheck(
            [](const std::vector<Tensor>& in) { return in[0].to(DType::f32).to(DType::f64).flatten(); },
            {y}, {.eps = 1e-2, .atol = 1e-4, .rtol = 1e-4}) == "");
}

TEST_CASE("tensor hooks see and replace gradients, leaf hooks run before accumulation", "[autograd][hooks]") {
  std::vector<std::string> log;
  Tensor x = iota({3}, DType::f64).requires_grad_();
  Tensor mid = x.unsqueeze(0);  // [1, 3]
  mid.register_hook([&](const Tensor& g) {
    log.push_back("mid");
    return g.reshape({1, 3}).clone().expand({1, 3}).contiguous();  // unchanged values
  });
  int doubled = mid.register_hook([&](const Tensor& g) {
    log.push_back("double");
    std::vector<double> v = g.contiguous().to_vector<double>();
    for (double& e : v) e *= 2;
    return from_vector<double>(v, g.sizes());
  });
  x.register_hook([&](const Tensor& g) {
    log.push_back("leaf");
    return Tensor();  // keep
  });
  mid.grad_fn()->add_post_hook([&](const std::vector<Tensor>& grad_inputs, const std::vector<Tensor>&) {
    log.push_back("post:" + std::to_string(grad_inputs[0].numel()));
  });
  mid.squeeze(0).backward(from_vector<double>({1, 2, 3}));
  CHECK(log == std::vector<std::string>{"mid", "double", "post:3", "leaf"});
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 4, 6});
  mid.remove_hook(doubled);
  x.set_grad(Tensor());
  log.clear();
  x.unsqueeze(0).squeeze(0).backward(from_vector<double>({1, 1, 1}));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 1, 1});
}

TEST_CASE("callbacks queued during backward run once, after every node", "[autograd][hooks]") {
  std::vector<std::string> log;
  Tensor a = iota({2}, DType::f64).requires_grad_();
  Tensor b = iota({2}, DType::f64).requires_grad_();
  a.register_hook([&](const Tensor&) {
    log.push_back("a");
    autograd::queue_callback([&] {
      log.push_back("final");
      autograd::queue_callback([&] { log.push_back("final2"); });
    });
    return Tensor();
  });
  b.register_hook([&](const Tensor&) {
    log.push_back("b");
    return Tensor();
  });
  autograd::backward({a.unsqueeze(1), b.unsqueeze(0)},
                     {ones({2, 1}, {.dtype = DType::f64}), ones({1, 2}, {.dtype = DType::f64})});
  REQUIRE(log.size() == 4);
  CHECK(log[2] == "final");
  CHECK(log[3] == "final2");
  CHECK_FALSE(autograd::in_backward());
  CHECK_THROWS_WITH(autograd::queue_callback([] {}), Catch::Contains("only callable while a backward"));
}

TEST_CASE("retain_grad keeps a non-leaf's gradient, detach and NoGradGuard cut the graph", "[autograd]") {
  Tensor x = iota({2, 2}, DType::f64).requires_grad_();
  Tensor y = x.t();
  y.retain_grad();
  Tensor d = x.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.storage().is_same(x.storage()));
  {
    NoGradGuard no_grad;
    CHECK_FALSE(x.t().requires_grad());
  }
  y.reshape({4}).backward(from_vector<double>({1, 2, 3, 4}));
  CHECK(y.grad().to_vector<double>() == std::vector<double>{1, 2, 3, 4});
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 3, 2, 4});
}

TEST_CASE("saved tensors: backward twice and in-place changes are clear errors", "[autograd]") {
  Tensor x = iota({3}, DType::f64).requires_grad_();
  Tensor c = from_vector<double>({1, 2, 3});
  Tensor y = scale_by_saved(x, c);
  y.backward(ones({3}, {.dtype = DType::f64}), /*retain_graph=*/true);
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 2, 3});
  y.backward(ones({3}, {.dtype = DType::f64}));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 4, 6});
  CHECK_THROWS_WITH(y.backward(ones({3}, {.dtype = DType::f64})),
                    Catch::Contains("backward through the graph a second time"));
  Tensor y2 = scale_by_saved(x, c);
  c.fill_(7);
  CHECK_THROWS_WITH(y2.backward(ones({3}, {.dtype = DType::f64})),
                    Catch::Contains("modified by an in-place op after it was saved"));
}

TEST_CASE("autograd rejects bad input with clear messages", "[autograd]") {
  Tensor x = iota({2, 3}, DType::f64).requires_grad_();
  CHECK_THROWS_WITH(x.t().backward(), Catch::Contains("can be implied only for a one-element tensor"));
  CHECK_THROWS_WITH(iota({1}, DType::f64).backward(), Catch::Contains("does not require grad and has no grad_fn"));
  CHECK_THROWS_WITH(x.t().backward(ones({2, 3}, {.dtype = DType::f64})),
                    Catch::Contains("gradient 0 has shape [2, 3], expected [3, 2]"));
  CHECK_THROWS_WITH(arange(3, {.dtype = DType::i64}).requires_grad_(),
                    Catch::Contains("only floating tensors can require gradients, got dtype i64"));
  CHECK_THROWS_WITH(x.t().requires_grad_(false), Catch::Contains("only leaf tensors"));
  CHECK_THROWS_WITH(x.fill_(0), Catch::Contains("fill_: in-place write to a tensor that requires grad"));
  CHECK_THROWS_WITH(zeros({2, 3}, {.dtype = DType::f64}).copy_(x),
                    Catch::Contains("copying from a tensor that requires grad"));
  CHECK_THROWS_WITH(x.as_strided({6}, {1}, 0), Catch::Contains("as_strided: not differentiable"));
  {
    NoGradGuard no_grad;
    x.fill_(1);  // initialisation under NoGradGuard is fine
  }
  CHECK(x.to_vector<double>() == std::vector<double>(6, 1.0));
  CHECK_THROWS_WITH(x.set_grad(zeros({3})), Catch::Contains("set_grad: gradient of shape [3]"));
  // A conversion to an integer dtype simply carries no gradient.
  CHECK_FALSE(x.to(DType::i64).requires_grad());
}

TEST_CASE("a leaf's first gradient is taken over when nothing else holds it, else copied", "[autograd]") {
  Tensor c = iota({4}, DType::f64) + 1;
  SECTION("a fresh, contiguous gradient becomes .grad itself, counted as a gradient") {
    Tensor x = iota({4}, DType::f64).requires_grad_();
    const void* incoming = nullptr;
    x.register_hook([&](const Tensor& g) {
      incoming = g.raw_data();  // the address only: holding g would forbid the takeover
      return Tensor();
    });
    scale_by_saved(x, c).backward(from_vector<double>({1, 1, 1, 1}));
    CHECK(x.grad().raw_data() == incoming);
    CHECK(x.grad().storage().tag() == MemoryTag::grad);
    CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 2, 3, 4});
    // The second backward adds into it in place.
    const void* first = incoming;
    scale_by_saved(x, c).backward(from_vector<double>({1, 1, 1, 1}));
    CHECK(x.grad().raw_data() == first);
    CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 4, 6, 8});
  }
  SECTION("a gradient someone else holds is copied, so .grad never aliases it") {
    Tensor x = iota({4}, DType::f64).requires_grad_();
    Tensor kept;
    x.register_hook([&](const Tensor& g) {
      kept = g;
      return Tensor();
    });
    scale_by_saved(x, c).backward(from_vector<double>({1, 1, 1, 1}));
    CHECK(x.grad().raw_data() != kept.raw_data());
    scale_by_saved(x, c).backward(from_vector<double>({1, 1, 1, 1}));
    CHECK(kept.to_vector<double>() == std::vector<double>{1, 2, 3, 4});
  }
  SECTION("the gradient passed to backward() by the caller is copied") {
    Tensor x = iota({4}, DType::f64).requires_grad_();
    Tensor upstream = from_vector<double>({1, 2, 3, 4});
    x.backward(upstream);
    CHECK(x.grad().raw_data() != upstream.raw_data());
    x.backward(upstream);
    CHECK(upstream.to_vector<double>() == std::vector<double>{1, 2, 3, 4});
    CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 4, 6, 8});
  }
  SECTION("one gradient sent to two leaves is copied for the first, taken by the second") {
    Tensor x = iota({4}, DType::f64).requires_grad_(), y = iota({4}, DType::f64).requires_grad_();
    (x + y).backward(from_vector<double>({1, 1, 1, 1}));
    CHECK(x.grad().raw_data() != y.grad().raw_data());
    add_(x.grad(), x.grad());
    CHECK(y.grad().to_vector<double>() == std::vector<double>{1, 1, 1, 1});
  }
  SECTION("an expanded (broadcast) gradient is copied into a dense .grad") {
    Tensor x = iota({2, 3}, DType::f64).requires_grad_();
    sum(x).backward();
    CHECK(x.grad().is_contiguous());
    CHECK(x.grad().to_vector<double>() == std::vector<double>(6, 1.0));
  }
}
