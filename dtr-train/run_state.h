// The state of one dtr-train run, handed from phase to phase (trainer.cpp,
// training_loop.h): what set-up found, the sharded model and what trains it,
// and the progress the training loop reports.
#pragma once

#include "config.h"
#include "dataset.h"
#include "metrics.h"
#include "output_dir.h"
#include "sampler.h"
#include "train_checkpoint.h"

#include "dtr/fsdp/fully_shard.h"
#include "dtr/mesh/device_mesh.h"
#include "dtr/mesh/process_group.h"
#include "dtr/nn/optim/fused_adamw.h"
#include "dtr/nn/optim/lr_schedule.h"
#include "dtr/nn/parameter.h"
#include "dtr/nn/transformer.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtr::train {

using Clock = std::chrono::steady_clock;

// What a run finds before any collective, identically on every rank: the data,
// its train and validation splits, this rank's sampler, and the model shape.
struct Setup {
  std::optional<TokenDataset> data, train, val;
  std::optional<DistributedSampler> sampler;
  nn::TransformerConfig model;
};

struct Run {
  TrainConfig c;  // seq_len resolved by set-up
  int rank = 0;
  mesh::ProcessGroupPtr world;

  // Set-up.
  Setup s;
  std::optional<OutputDirLock> out_lock;  // rank 0: --out is this job's until the run ends
  TrainedAs trained_as;                   // what the checkpoints record
  Device device = Device::cpu();          // where the model computes
  std::filesystem::path out_dir;

  // The model and what trains it.
  std::string model_name;  // --model, or the --init-from directory
  std::shared_ptr<nn::Transformer> model;
  int64_t num_params = 0;
  mesh::DeviceMesh dp_mesh;
  std::optional<mesh::DeviceMesh> tp_mesh;  // --tp > 1
  // The job's process groups (the world and each mesh dim's), whose bytes the
  // metrics count, and this rank's totals at the last count.
  std::vector<mesh::ProcessGroupPtr> comm_groups;
  mesh::LinkBytes counted_sent;
  std::optional<fsdp::FSDPModule> root;
  std::vector<nn::Parameter> params;
  std::optional<nn::optim::FusedAdamW> opt;
  nn::optim::LrSchedule schedule;

  // What the reports need; rank 0 writes the files and prints.
  int64_t start_step = 0;  // the steps taken before this run (by the resumed checkpoint)
  int64_t tokens_per_step = 0;
  double flops_per_token = 0;
  bool tty = false;  // rank 0 redraws a progress bar between progress lines
  std::optional<MetricsWriter> metrics;  // rank 0
  LossCurves curves;                     // filled on rank 0

  // The progress of the training loop.
  Clock::time_point start;               // when this run's first step began
  double first_loss = 0, last_loss = 0;  // of the steps that updated the parameters
  int64_t updated = 0, skipped = 0;      // steps taken, and dropped by --on-nonfinite skip
  int64_t saved_step = -1;               // the step of the last complete checkpoint this run wrote
  int64_t writing_step = -1;             // the step of the checkpoint written in the background (--async-ckpt)

  // <out>/checkpoints/step_<step>
  std::filesystem::path checkpoint_dir(int64_t step) const {
    return out_dir / "checkpoints" / fmt::format("step_{}", step);
  }
  // Rank 0's prefix of a line that may follow the progress bar: it clears that line.
  const char* line_start() const { return tty ? "\r\033[K" : ""; }
};

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace dtr::train
