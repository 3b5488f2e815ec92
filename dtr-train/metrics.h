// Run metrics on rank 0: one JSON object per optimizer step in metrics.jsonl, the
// loss curves of loss.svg, the one-line progress report, the terminal progress
// bar, and the model-FLOP count.
//
// FLOPs are model FLOPs (what the step must compute, as in the PaLM / nanoGPT
// MFU estimate): per token 6 * params (forward + backward of every weight) plus
// 12 * n_layers * dim * seq_len for attention scores and their use; activation
// checkpointing's recomputation is not counted.
#pragma once

#include "dtr/nn/transformer.h"
#include "dtr/tensor/memory_stats.h"

#include <array>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dtr::train {

double model_flops_per_token(int64_t num_params, const nn::TransformerConfig& model, int64_t seq_len);

struct StepRecord {
  int64_t step = 0;  // 1-based optimizer step
  int64_t total_steps = 0;
  double loss = 0;   // mean over the global batch
  std::optional<double> val_loss;
  double lr = 0;
  double grad_norm = 0;
  int64_t tokens = 0;  // tokens in this step's global batch
  double step_seconds = 0;
  double elapsed_seconds = 0;  // since the first step began
  double tokens_per_second = 0;
  double flops_per_second = 0;
  std::optional<double> mfu;  // on a GPU: flops_per_second / the GPU's peak
  bool skipped = false;       // --on-nonfinite skip dropped this step's update
  // Bytes all ranks sent in this step's collectives, within their hosts and across
  // hosts (mesh::CommStats::sent_*: a ring's volume, not a measurement).
  int64_t comm_bytes_within_host = 0, comm_bytes_across_hosts = 0;
  std::vector<int64_t> samples;  // --log-samples: the global batch's sample indices, every rank's in rank order
};

// Peak bytes by memory tag for every rank: peaks[rank][tag] (tags of dtr/tensor/memory_stats.h).
using RankPeaks = std::vector<std::array<int64_t, kNumMemoryTags>>;

// One finished step as metrics.jsonl recorded it (for the plot of a resumed run).
struct LoggedStep {
  int64_t step = 0;
  std::optional<double> loss;      // none: not finite (a skipped step)
  std::optional<double> val_loss;
};

class MetricsWriter {
 public:
  // Starts `path` afresh, or, resuming after step `resumed_step` > 0, keeps its lines
  // of steps up to that one (those of an abandoned continuation, and a line cut off
  // mid-write, are dropped) and appends after them.
  explicit MetricsWriter(const std::string& path, int64_t resumed_step = 0);
  void write(const StepRecord& record);  // one line, flushed
  // The steps kept from before the resume, in order.
  const std::vector<LoggedStep>& kept() const { return kept_; }

 private:
  std::string path_;
  std::ofstream out_;
  std::vector<LoggedStep> kept_;
};

// The loss history loss.svg plots: the train loss of every step and the validation
// loss of every evaluation, a resumed run's earlier steps included; non-finite
// losses are left out.
class LossCurves {
 public:
  LossCurves() = default;
  LossCurves(std::string path, std::string title) : path_(std::move(path)), title_(std::move(title)) {}
  void add(const LoggedStep& logged);  // a step kept in metrics.jsonl from before a resume
  void add(const StepRecord& record);
  double last_val_loss() const { return val_.empty() ? 0.0 : val_.back().second; }  // 0: none yet
  const std::string& path() const { return path_; }
  void write() const;  // rewrites the file whole

 private:
  std::string path_, title_;
  std::vector<std::pair<double, double>> train_, val_;  // (step, loss)
};

// "step  120/300 | loss 2.3141 | val 2.4011 | lr 2.71e-03 | gnorm 0.812 | 10.2k tok/s | 3.41 GFLOP/s |
//  peak MiB r0 p0.1 g0.1 o0.2 a3.1 c0.2 s0.0 x1.0 r1 ... | ETA 0:42"
// (peak MiB by tag: param, grad, optimizer state, activation, comm buffer,
// checkpoint staging, other)
std::string progress_line(const StepRecord& record, const RankPeaks& peaks);
// "[#########..........]  45%  135/300" (for a terminal, rewritten in place with '\r').
std::string progress_bar(int64_t step, int64_t total, int width = 30);
std::string format_duration(double seconds);  // "1:05", "1:02:03"

}  // namespace dtr::train
