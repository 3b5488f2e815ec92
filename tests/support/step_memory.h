// The memory of training steps, measured from the allocator's tagged statistics
// (CPU), for the memory estimator's tests: what the parameters, gradients and
// optimizer state grew by since `before` (taken before the model was built), and
// over a step's forward + backward the peak of unsharded parameters (param tag
// above what the step started with) and of activations (what the loss function
// and backward allocate, run under MemoryTagGuard(activation)). Two steps are
// taken, so the second sees the optimizer state the first allocated.
#pragma once

#include "dtr/nn/optim/optimizer.h"
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>

namespace dtr::testing {

struct StepMemory {
  int64_t params = 0, grads = 0, optimizer_state = 0, unsharded_peak = 0, activations = 0;
};

inline StepMemory measure_step_memory(const MemoryStats& before, nn::optim::Optimizer& opt,
                                      const std::function<Tensor()>& loss_of_step) {
  StepMemory m;
  for (int step = 0; step < 2; ++step) {
    reset_peak_memory_stats(Device::cpu());
    const auto start = memory_stats(Device::cpu());
    {
      MemoryTagGuard tag(MemoryTag::activation);
      loss_of_step().backward();
    }
    opt.step();
    opt.zero_grad(/*set_to_none=*/false);
    const auto after = memory_stats(Device::cpu());
    m.unsharded_peak = after[MemoryTag::param].peak_bytes - start[MemoryTag::param].current_bytes;
    m.activations = after[MemoryTag::activation].peak_bytes - start[MemoryTag::activation].current_bytes;
  }
  const auto after = memory_stats(Device::cpu());
  auto grown = [&](MemoryTag tag) { return after[tag].current_bytes - before[tag].current_bytes; };
  m.params = grown(MemoryTag::param);
  m.grads = grown(MemoryTag::grad);
  m.optimizer_state = grown(MemoryTag::optimizer_state);
  return m;
}

// |got - expected| / expected (expected taken as at least 1).
inline double relative_to(int64_t got, int64_t expected) {
  return std::abs(static_cast<double>(got - expected)) / static_cast<double>(std::max<int64_t>(expected, 1));
}

}  // namespace dtr::testing
