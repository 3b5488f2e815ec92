// LR schedules (dtr/nn/optim/lr_schedule.h) at chosen steps against their closed
// forms, and clip_grad_norm_ (dtr/nn/optim/clip_grad.h) total norms and scaling
// against hand-computed values for the 2-norm, 1-norm and inf-norm.
#include "dtr/base/error.h"
#include "dtr/nn/optim/clip_grad.h"
#include "dtr/nn/optim/lr_schedule.h"
#include "dtr/nn/optim/sgd.h"
#include "dtr/tensor/factory.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

using namespace dtr;
using namespace dtr::nn::optim;

namespace {

Tensor param_with_grad(const std::vector<double>& grad, Shape shape) {
  Tensor p = zeros(shape, {.dtype = DType::f64});
  p.requires_grad_();
  p.set_grad(from_vector<double>(grad, shape));
  return p;
}

}  // namespace

TEST_CASE("constant_lr gives the same lr at every step", "[optim]") {
  const LrSchedule s = constant_lr(0.3);
  CHECK(s(0) == 0.3);
  CHECK(s(1000000) == 0.3);
  CHECK_THROWS_WITH(s(-1), Catch::Contains("step must be >= 0"));
}

TEST_CASE("warmup_cosine warms up linearly then follows the cosine down to min_lr", "[optim]") {
  const LrSchedule s = warmup_cosine({.peak_lr = 1.0, .min_lr = 0.1, .warmup_steps = 4, .total_steps = 14});
  CHECK(s(0) == Approx(0.25).margin(1e-12));
  CHECK(s(1) == Approx(0.5).margin(1e-12));
  CHECK(s(3) == Approx(1.0).margin(1e-12));
  CHECK(s(4) == Approx(1.0).margin(1e-12));
  CHECK(s(6) == Approx(0.1 + 0.9 * 0.5 * (1.0 + std::cos(std::numbers::pi * 0.2))).margin(1e-12));
  CHECK(s(9) == Approx(0.55).margin(1e-12));
  CHECK(s(14) == Approx(0.1).margin(1e-12));
  CHECK(s(1000) == Approx(0.1).margin(1e-12));
  const LrSchedule no_warmup = warmup_cosine({.peak_lr = 2.0, .warmup_steps = 0, .total_steps = 4});
  CHECK(no_warmup(0) == Approx(2.0).margin(1e-12));
  CHECK(no_warmup(2) == Approx(1.0).margin(1e-12));
  CHECK(no_warmup(4) == Approx(0.0).margin(1e-12));
}

TEST_CASE("warmup_linear warms up linearly then decays linearly to min_lr", "[optim]") {
  const LrSchedule s = warmup_linear({.peak_lr = 1.0, .min_lr = 0.1, .warmup_steps = 4, .total_steps = 14});
  CHECK(s(0) == Approx(0.25).margin(1e-12));
  CHECK(s(4) == Approx(1.0).margin(1e-12));
  CHECK(s(6) == Approx(0.82).margin(1e-12));
  CHECK(s(9) == Approx(0.55).margin(1e-12));
  CHECK(s(13) == Approx(0.19).margin(1e-12));
  CHECK(s(14) == Approx(0.1).margin(1e-12));
  CHECK(s(50) == Approx(0.1).margin(1e-12));
}

TEST_CASE("apply_lr_schedule sets the optimizer lr and schedules refuse bad options", "[optim]") {
  Tensor p = zeros({2});
  p.requires_grad_();
  SGD opt({p}, {.lr = 0.5});
  const LrSchedule s = warmup_linear({.peak_lr = 0.2, .warmup_steps = 2, .total_steps = 4});
  CHECK(apply_lr_schedule(opt, s, 0) == Approx(0.1));
  CHECK(opt.lr() == Approx(0.1));
  CHECK(apply_lr_schedule(opt, s, 3) == Approx(0.1));
  CHECK(opt.lr() == Approx(0.1));
  CHECK(apply_lr_schedule(opt, s, 2) == Approx(0.2));
  CHECK(opt.lr() == Approx(0.2));
  CHECK_THROWS_WITH(apply_lr_schedule(opt, LrSchedule{}, 0), Catch::Contains("schedule is empty"));
  CHECK_THROWS_WITH(warmup_cosine({.warmup_steps = 5, .total_steps = 5}),
                    Catch::Contains("total_steps must be > warmup_steps"));
  CHECK_THROWS_WITH(warmup_linear({.peak_lr = 1.0, .min_lr = 2.0, .total_steps = 5}),
                    Catch::Contains("min_lr must be in [0, peak_lr"));
  CHECK_THROWS_WITH(warmup_linear({.warmup_steps = -1, .total_steps = 5}), Catch::Contains("warmup_steps"));
  CHECK_THROWS_WITH(constant_lr(-0.1), Catch::Contains("lr must be finite and >= 0"));
}

TEST_CASE("clip_grad_norm_ with the 2-norm returns the total norm and scales grads above max_norm", "[optim]") {
  Tensor a = param_with_grad({3.0, -4.0}, {2});
  Tensor b = param_with_grad({12.0}, {1, 1});
  Tensor no_grad = zeros({3});
  no_grad.requires_grad_();
  const std::vector<Tensor> params = {a, no_grad, b};
  CHECK(local_grad_norm_pow(params) == Approx(169.0).margin(1e-12));
  const double total = clip_grad_norm_(params, 6.5);
  CHECK(total == Approx(13.0).margin(1e-12));
  const double coef = 6.5 / (13.0 + 1e-6);
  CHECK(a.grad().to_vector<double>()[0] == Approx(3.0 * coef).margin(1e-12));
  CHECK(a.grad().to_vector<double>()[1] == Approx(-4.0 * coef).margin(1e-12));
  CHECK(b.grad().to_vector<double>()[0] == Approx(12.0 * coef).margin(1e-12));
  CHECK_FALSE(no_grad.grad().defined());

  // Below max_norm: unchanged.
  Tensor c = param_with_grad({3.0, -4.0}, {2});
  CHECK(clip_grad_norm_({c}, 10.0) == Approx(5.0).margin(1e-12));
  CHECK(c.grad().to_vector<double>() == (std::vector<double>{3.0, -4.0}));
}

TEST_CASE("clip_grad_norm_ with the inf-norm and 1-norm uses max and sum of magnitudes", "[optim]") {
  Tensor a = param_with_grad({3.0, -4.0}, {2});
  Tensor b = param_with_grad({-12.0}, {1});
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(local_grad_norm_pow({a, b}, inf) == Approx(12.0).margin(1e-12));
  CHECK(local_grad_norm_pow({a, b}, 1.0) == Approx(19.0).margin(1e-12));
  CHECK(total_norm_from_pow(19.0, 1.0) == Approx(19.0).margin(1e-12));
  CHECK(total_norm_from_pow(169.0, 2.0) == Approx(13.0).margin(1e-12));
  const double total = clip_grad_norm_({a, b}, 3.0, inf);
  CHECK(total == Approx(12.0).margin(1e-12));
  const double coef = 3.0 / (12.0 + 1e-6);
  CHECK(a.grad().to_vector<double>()[1] == Approx(-4.0 * coef).margin(1e-12));
  CHECK(b.grad().to_vector<double>()[0] == Approx(-12.0 * coef).margin(1e-12));

  Tensor f = param_with_grad({1.0, 2.0, 2.0}, {3});  // 3-norm: (1 + 8 + 8)^(1/3)
  CHECK(clip_grad_norm_({f}, 100.0, 3.0) == Approx(std::cbrt(17.0)).margin(1e-12));

  Tensor s = zeros({4});  // f32 grads accumulate in double too
  s.requires_grad_();
  s.set_grad(full({4}, 0.5));
  CHECK(clip_grad_norm_({s}, 100.0) == Approx(1.0).margin(1e-7));
}

TEST_CASE("clip_grad_norm_ leaves grads alone on a non-finite norm and refuses bad arguments", "[optim]") {
  Tensor a = param_with_grad({std::numeric_limits<double>::infinity(), 1.0}, {2});
  CHECK(std::isinf(clip_grad_norm_({a}, 1.0)));
  CHECK(a.grad().to_vector<double>()[1] == 1.0);
  Tensor b = param_with_grad({1.0}, {1});
  CHECK_THROWS_WITH(clip_grad_norm_({b}, 1.0, 0.0), Catch::Contains("norm_type must be > 0 or inf"));
  CHECK_THROWS_WITH(clip_grad_norm_({b}, 1.0, -2.0), Catch::Contains("norm_type"));
  CHECK_THROWS_WITH(clip_grad_norm_({b}, -1.0), Catch::Contains("max_norm must be >= 0"));
  CHECK_THROWS_WITH(local_grad_norm_pow({Tensor()}), Catch::Contains("undefined"));
  CHECK(clip_grad_norm_(std::vector<Tensor>{}, 1.0) == 0.0);
  CHECK(clip_grad_norm_(std::vector<nn::Parameter>{}, 1.0) == 0.0);
}

TEST_CASE("clip_grad_norm_ with error_if_nonfinite throws on a NaN or infinite norm and leaves grads alone",
          "[optim]") {
  Tensor a = param_with_grad({std::nan(""), 2.0}, {2});
  CHECK_THROWS_WITH(clip_grad_norm_({a}, 1.0, 2.0, /*error_if_nonfinite=*/true),
                    Catch::Contains("total norm of order 2 of the gradients is nan"));
  CHECK(a.grad().to_vector<double>()[1] == 2.0);
  Tensor b = param_with_grad({-std::numeric_limits<double>::infinity()}, {1});
  CHECK_THROWS_WITH(clip_grad_norm_({b}, 1.0, std::numeric_limits<double>::infinity(), true),
                    Catch::Contains("is inf"));
  Tensor c = param_with_grad({3.0, -4.0}, {2});  // finite: clipped as without the flag
  CHECK(clip_grad_norm_({c}, 1.0, 2.0, true) == Approx(5.0).margin(1e-12));
  CHECK(c.grad().to_vector<double>()[0] == Approx(3.0 / (5.0 + 1e-6)).margin(1e-12));
}
