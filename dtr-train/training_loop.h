// The training loop of a dtr-train run: each step's forward, backward and update,
// the checkpoints, evaluations and progress reports due after it, and the ends a
// step can bring (a stop signal, a non-finite loss or gradient norm, a checkpoint
// refused for non-finite parameters). Collective calls happen at the same points
// on every rank; what only rank 0 does is printing and writing files.
#pragma once

#include "run_state.h"

#include <optional>

namespace dtr::train {

// Takes the steps from run.start_step to --steps. Returns the exit code when the
// run ends early (0: stopped by a signal after saving a checkpoint; 1: a non-finite
// step with --on-nonfinite stop, or a checkpoint refused), none after the last step.
std::optional<int> run_training_loop(Run& run);

}  // namespace dtr::train
