// Helpers of the fused-optimizer tests (fused_adamw_test.cpp, fused_sgd_test.cpp):
// parameter lists cloned from one another, identical gradients for both, and the
// bit-for-bit comparison of two optimizers' parameters and states.
#pragma once

#include "dtr/kernels/cpu/parallel.h"
#include "dtr/nn/optim/optimizer.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/random.h"
#include "tests/support/op_by_op_optimizers.h"
#include "tests/support/values.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace dtr::testing::optim {


using dtr::nn::optim::Optimizer;
using dtr::nn::optim::ParamState;

// Sizes not multiples of any vector width, an empty one, and one big enough (with the
// others) to be split across threads.
inline const std::vector<Shape> kShapes = {{1}, {3}, {7, 5}, {0}, {4099}, {300, 111}};

// Parameters of kShapes with values from `seed`, requiring grad.
inline std::vector<Tensor> make_params(DType dtype, uint64_t seed) {
  manual_seed(seed);
  std::vector<Tensor> params;
  for (const Shape& s : kShapes) {
    Tensor p = randn(s, {.dtype = dtype});
    p.requires_grad_();
    params.push_back(p);
  }
  return params;
}

inline std::vector<Tensor> clone_params(const std::vector<Tensor>& params) {
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
// The lists hold tensors or nn::Parameters (an optimizer's params()).
template <class A, class B>
void set_grads(const std::vector<A>& a, const std::vector<B>& b, uint64_t seed, size_t skip) {
  manual_seed(seed);
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor& x = a[i];
    const Tensor& y = b[i];
    if (i == skip) {
      x.set_grad({});
      y.set_grad({});
      continue;
    }
    Tensor g = randn(x.sizes(), {.dtype = x.dtype()});
    x.set_grad(g.clone());
    y.set_grad(g.clone());
  }
}

// Bit-for-bit equality of two same-shaped, same-dtype tensors.
inline bool same_bits(const Tensor& x, const Tensor& y) {
  if (x.sizes() != y.sizes() || x.dtype() != y.dtype()) return false;
  if (x.numel() == 0) return true;  // empty tensors have no data pointer to compare
  const Tensor cx = x.detach().contiguous(), cy = y.detach().contiguous();
  return std::memcmp(cx.raw_data(), cy.raw_data(), cx.nbytes()) == 0;
}

inline void check_same(const Optimizer& ref, const Optimizer& fused) {
  REQUIRE(ref.params().size() == fused.params().size());
  for (size_t i = 0; i < ref.params().size(); ++i) {
    INFO("parameter " << i << " of shape " << shape_str(ref.params()[i]->sizes()));
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
inline void run_both(Optimizer& ref, Optimizer& fused, int steps, uint64_t seed) {
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

// Five steps of the op-by-op optimizer and the fused one from the same parameters of
// kShapes (parameter 2 skips a step, the lr halves after step 2): the same bits, and
// the parameters did move.
template <class Ref, class Fused, class Options>
void check_fused_matches(DType dtype, const Options& options) {
  std::vector<Tensor> a = make_params(dtype, 7);
  std::vector<Tensor> b = clone_params(a);
  Ref ref(a, options);
  Fused fused(b, options);
  run_both(ref, fused, 5, 100);
  check_same(ref, fused);
  CHECK(ref.state(2).step == 4);                      // the skipped step left parameter 2 one update behind
  CHECK(!same_bits(a[5], make_params(dtype, 7)[5]));  // and the parameters did move
}

// A fused optimizer on 1 and on 2 threads, over kShapes and a tensor big enough for
// several parallel chunks: the same bits.
template <class Fused, class Options>
void check_thread_count_independent(const Options& options) {
  ThreadCountGuard guard;
  std::vector<Tensor> a = make_params(DType::f32, 21);
  Tensor big = randn({250003});  // several parallel chunks, an odd split point
  big.requires_grad_();
  a.push_back(big);
  std::vector<Tensor> b = clone_params(a);
  Fused one(a, options);
  Fused two(b, options);
  for (int t = 0; t < 3; ++t) {
    set_grads(a, b, 400 + static_cast<uint64_t>(t), 99);
    kernels::set_num_threads(1);
    one.step();
    kernels::set_num_threads(2);
    two.step();
  }
  check_same(one, two);
}

// The op-by-op optimizer's state dict loads into the fused one and the other way
// round, both of `kind`, and both continue bit for bit alike.
template <class Ref, class Fused, class Options>
void check_state_dicts_interchange(const Options& options, const std::string& kind) {
  std::vector<Tensor> a = make_params(DType::f32, 31);
  std::vector<Tensor> b = clone_params(a);
  Ref ref(a, options);
  Fused fused(b, options);
  run_both(ref, fused, 2, 500);

  // Ref -> Fused: a fresh fused optimizer on copies of the reference's parameters.
  std::vector<Tensor> c = clone_params(a);
  Fused resumed(c, options);
  const nn::optim::OptimizerState sd = ref.state_dict();
  CHECK(sd.kind == kind);
  CHECK(fused.state_dict().kind == kind);
  resumed.load_state_dict(sd);
  check_same(ref, resumed);
  run_both(ref, resumed, 2, 600);
  check_same(ref, resumed);

  // Fused -> Ref.
  std::vector<Tensor> d = clone_params(b);
  Ref back(d, options);
  back.load_state_dict(fused.state_dict());
  run_both(back, fused, 2, 700);
  check_same(back, fused);
}

// A non-contiguous grad: the fused optimizer (which copies it) matches the op-by-op one.
template <class Ref, class Fused, class Options>
void check_strided_grad(const Options& options) {
  Tensor p = randn({4, 6});
  p.requires_grad_();
  Tensor q = p.detach().clone();
  q.requires_grad_();
  Ref ref({p}, options);
  Fused fused({q}, options);
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

}  // namespace dtr::testing::optim
