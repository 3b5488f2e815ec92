// LR schedules: functions from the optimizer step to a learning rate, and
// apply_lr_schedule() to set an optimizer's lr from one.
//
// Step semantics: `step` counts optimizer steps taken before this one, so step 0
// is the first optimizer step. Call apply_lr_schedule(opt, schedule, step) before
// opt.step() in each iteration.
//
//   constant_lr(lr):        lr at every step.
//   warmup_cosine(options): for step < warmup_steps, peak_lr * (step + 1) / warmup_steps
//                           (the first step already moves; step warmup_steps - 1 reaches
//                           peak_lr); then with progress = (step - warmup_steps) /
//                           (total_steps - warmup_steps), clamped to [0, 1]:
//                           min_lr + (peak_lr - min_lr) * (1 + cos(pi * progress)) / 2,
//                           so step >= total_steps gives min_lr.
//   warmup_linear(options): the same warmup, then peak_lr + (min_lr - peak_lr) * progress.
// A negative step is an error.
#pragma once

#include <cstdint>
#include <functional>

namespace dtr::nn::optim {

class Optimizer;

using LrSchedule = std::function<double(int64_t step)>;

struct WarmupDecayOptions {
  double peak_lr = 1e-3;
  double min_lr = 0.0;        // 0 <= min_lr <= peak_lr
  int64_t warmup_steps = 0;   // >= 0
  int64_t total_steps = 1;    // > warmup_steps: warmup plus decay
};

LrSchedule constant_lr(double lr);
LrSchedule warmup_cosine(const WarmupDecayOptions& options);
LrSchedule warmup_linear(const WarmupDecayOptions& options);

// Sets optimizer's lr to schedule(step) and returns it.
double apply_lr_schedule(Optimizer& optimizer, const LrSchedule& schedule, int64_t step);

}  // namespace dtr::nn::optim
