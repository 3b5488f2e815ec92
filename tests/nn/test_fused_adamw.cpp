// FusedAdamW (nn/optim/fused_adamw.h) against the op-by-op AdamW: bit-identical
// parameters and moments over several steps with weight decay, an lr change and a
// skipped parameter, on f32 and f64 parameters of mixed sizes (empty, odd, larger
// than one thread's share); identical results on 1 and 2 threads; state_dicts
// moving both ways between AdamW and FusedAdamW; strided grads; input errors.
#include "dtensor/error.h"
#include "dtensor/factory.h"
#include "dtensor/random.h"
#include "kernels/cpu/parallel.h"
#include "nn/optim/adamw.h"
#include "nn/optim/fused_adamw.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

using namespace dtr;
using namespace dtr::nn::optim;

namespace {

// Sizes not multiples of any vector width, an empty one, and one big enough
// (with the others) to be split across threads.
const std::vector<Shape> kShapes = {{1}, {3}, {7, 5}, {0}, {4099}, {300, 111}};

const AdamWOptions kOptions{.lr = 3e-3, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6,
                            .weight_decay = 0.1};

struct ThreadCountGuard {
  int saved = kernels::num_threads();
  ~ThreadCountGuard() { kernels::set_num_threads(saved); }
};

std::vector<Tensor> make_params(DType dtype, uint64_t seed) {
  manual_seed(seed);
  std::vector<Tensor> params;
  for (const Shape& s : kShapes) {
    Tensor p = randn(s, {.dtype = dtype});
    p.requires_grad_();
    params.push_back(p);
  }
  return params;
}

std::vector<Tensor> clone_params(const std::vector<Tensor>& params) {
  std::vector<Tensor> out;
  for (const Tensor& p : params) {
    Tensor c = p.detach().clone();
    c.requires_grad_();
    out.push_back(c);
  }
  return out;
}

// Gives every parameter of both lists the same fresh gradient (larger than the
// weights, so the moments matter), except parameter `skip` (none if out of range).
void set_grads(const std::vector<Tensor>& a, const std::vector<Tensor>& b, uint64_t seed,
               size_t skip) {
  manual_seed(seed);
  for (size_t i = 0; i < a.size(); ++i) {
    if (i == skip) {
      a[i].set_grad({});
      b[i].set_grad({});
      continue;
    }
    Tensor g = randn(a[i].sizes(), {.dtype = a[i].dtype()});
    a[i].set_grad(g.clone());
    b[i].set_grad(g.clone());
  }
}

// Bit-for-bit equality of two same-shaped, same-dtype tensors.
bool same_bits(const Tensor& x, const Tensor& y) {
  if (x.sizes() != y.sizes() || x.dtype() != y.dtype()) return false;
  const Tensor cx = x.detach().contiguous(), cy = y.detach().contiguous();
  return std::memcmp(cx.raw_data(), cy.raw_data(), cx.nbytes()) == 0;
}

void check_same(const Optimizer& ref, const Optimizer& fused) {
  REQUIRE(ref.params().size() == fused.params().size());
  for (size_t i = 0; i < ref.params().size(); ++i) {
    INFO("parameter " << i << " of shape " << shape_str(ref.params()[i].sizes()));
    CHECK(same_bits(ref.params()[i], fused.params()[i]));
    const ParamState& rs = ref.state(i);
    const ParamState& fs = fused.state(i);
    CHECK(rs.step == fs.step);
    REQUIRE(rs.tensors.size() == fs.tensors.size());
    for (const auto& [name, t] : rs.tensors) {
      INFO("state " << name);
      REQUIRE(fs.tensors.count(name) == 1);
      CHECK(same_bits(t, fs.tensors.at(name)));
    }
  }
}

// Runs `steps` steps of both optimizers on identical grads (parameter 2 skips step 1,
// the lr drops after step 2).
void run_both(Optimizer& ref, Optimizer& fused, int steps, uint64_t seed) {
  for (int t = 0; t < steps; ++t) {
    if (t == 2) {
      ref.set_lr(ref.lr() * 0.5);
      fused.set_lr(fused.lr() * 0.5);
    }
    set_grads(ref.params(), fused.params(), seed + static_cast<uint64_t>(t), t == 1 ? 2 : 99);
    ref.step();
    fused.step();
  }
}

void check_matches_adamw(DType dtype) {
  std::vector<Tensor> a = make_params(dtype, 7);
  std::vector<Tensor> b = clone_params(a);
  AdamW ref(a, kOptions);
  FusedAdamW fused(b, kOptions);
  run_both(ref, fused, 5, 100);
  check_same(ref, fused);
  CHECK(ref.state(2).step == 4);  // the skipped step left parameter 2 one update behind
  CHECK(!same_bits(a[5], make_params(dtype, 7)[5]));  // and the parameters did move
}

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
  ThreadCountGuard guard;
  std::vector<Tensor> a = make_params(DType::f32, 21);
  Tensor big = randn({250003});  // several parallel chunks, an odd split point
  big.requires_grad_();
  a.push_back(big);
  std::vector<Tensor> b = clone_params(a);
  FusedAdamW one(a, kOptions);
  FusedAdamW two(b, kOptions);
  for (int t = 0; t < 3; ++t) {
    set_grads(a, b, 400 + static_cast<uint64_t>(t), 99);
    kernels::set_num_threads(1);
    one.step();
    kernels::set_num_threads(2);
    two.step();
  }
  check_same(one, two);
}

TEST_CASE("FusedAdamW and AdamW state dicts load into each other and continue identically") {
  std::vector<Tensor> a = make_params(DType::f32, 31);
  std::vector<Tensor> b = clone_params(a);
  AdamW ref(a, kOptions);
  FusedAdamW fused(b, kOptions);
  run_both(ref, fused, 2, 500);

  // AdamW -> FusedAdamW: a fresh FusedAdamW on copies of the reference's parameters.
  std::vector<Tensor> c = clone_params(a);
  FusedAdamW resumed(c, kOptions);
  const OptimizerState sd = ref.state_dict();
  CHECK(sd.kind == "AdamW");
  CHECK(fused.state_dict().kind == "AdamW");
  resumed.load_state_dict(sd);
  check_same(ref, resumed);
  run_both(ref, resumed, 2, 600);
  check_same(ref, resumed);

  // FusedAdamW -> AdamW.
  std::vector<Tensor> d = clone_params(b);
  AdamW back(d, kOptions);
  back.load_state_dict(fused.state_dict());
  run_both(back, fused, 2, 700);
  check_same(back, fused);
}

TEST_CASE("FusedAdamW copies a strided grad and matches AdamW") {
  Tensor p = randn({4, 6});
  p.requires_grad_();
  Tensor q = p.detach().clone();
  q.requires_grad_();
  AdamW ref({p}, kOptions);
  FusedAdamW fused({q}, kOptions);
  for (int t = 0; t < 2; ++t) {
    Tensor g = randn({6, 4}).t();  // shape [4, 6], not contiguous
    REQUIRE(!g.is_contiguous());
    p.set_grad(g);
    q.set_grad(g);
    ref.step();
    fused.step();
  }
  check_same(ref, fused);
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
