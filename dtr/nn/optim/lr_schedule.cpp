#include "dtr/nn/optim/lr_schedule.h"

#include "dtr/base/error.h"
#include "dtr/nn/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace dtr::nn::optim {

namespace {

void check_step(const char* name, int64_t step) {
  DTR_CHECK(step >= 0, "{}: step must be >= 0 (step 0 is the first step), got {}", name, step);
}

void check_options(const char* name, const WarmupDecayOptions& o) {
  DTR_CHECK(std::isfinite(o.peak_lr) && o.peak_lr >= 0.0, "{}: peak_lr must be finite and >= 0, got {}",
            name, o.peak_lr);
  DTR_CHECK(std::isfinite(o.min_lr) && o.min_lr >= 0.0 && o.min_lr <= o.peak_lr,
            "{}: min_lr must be in [0, peak_lr = {}], got {}", name, o.peak_lr, o.min_lr);
  DTR_CHECK(o.warmup_steps >= 0, "{}: warmup_steps must be >= 0, got {}", name, o.warmup_steps);
  DTR_CHECK(o.total_steps > o.warmup_steps,
            "{}: total_steps must be > warmup_steps, got total_steps {} and warmup_steps {}", name,
            o.total_steps, o.warmup_steps);
}

// Warmup value at `step`, or the decay progress in [0, 1] once warmup is over.
struct Phase {
  bool warming_up;
  double value;
};

Phase phase(const WarmupDecayOptions& o, int64_t step) {
  if (step < o.warmup_steps) {
    return {true, o.peak_lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps)};
  }
  const double progress = static_cast<double>(step - o.warmup_steps) /
                          static_cast<double>(o.total_steps - o.warmup_steps);
  return {false, std::clamp(progress, 0.0, 1.0)};
}

}  // namespace

LrSchedule constant_lr(double lr) {
  DTR_CHECK(std::isfinite(lr) && lr >= 0.0, "constant_lr: lr must be finite and >= 0, got {}", lr);
  return [lr](int64_t step) {
    check_step("constant_lr", step);
    return lr;
  };
}

LrSchedule warmup_cosine(const WarmupDecayOptions& options) {
  check_options("warmup_cosine", options);
  return [o = options](int64_t step) {
    check_step("warmup_cosine", step);
    const Phase p = phase(o, step);
    if (p.warming_up) return p.value;
    return o.min_lr + (o.peak_lr - o.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * p.value));
  };
}

LrSchedule warmup_linear(const WarmupDecayOptions& options) {
  check_options("warmup_linear", options);
  return [o = options](int64_t step) {
    check_step("warmup_linear", step);
    const Phase p = phase(o, step);
    if (p.warming_up) return p.value;
    return o.peak_lr + (o.min_lr - o.peak_lr) * p.value;
  };
}

double apply_lr_schedule(Optimizer& optimizer, const LrSchedule& schedule, int64_t step) {
  DTR_CHECK(static_cast<bool>(schedule), "apply_lr_schedule: the schedule is empty");
  const double lr = schedule(step);
  optimizer.set_lr(lr);
  return lr;
}

}  // namespace dtr::nn::optim
