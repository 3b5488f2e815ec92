#include "training_loop.h"

#include "consensus.h"
#include "stop_signal.h"

#include "dtr/checkpoint/async_save.h"
#include "dtr/nn/tensor_parallel/loss_parallel.h"
#include "dtr/nn/optim/clip_grad.h"
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/profiler.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

namespace dtr::train {

namespace {

struct Batch {
  Tensor inputs, targets;
};

Batch make_batch(const TokenDataset& ds, const std::vector<int64_t>& windows, int64_t seq, Device device) {
  DTR_PROFILE_SCOPE("data", "load batch");
  std::vector<int64_t> inputs, targets;
  inputs.reserve(windows.size() * static_cast<size_t>(seq));
  targets.reserve(windows.size() * static_cast<size_t>(seq));
  for (const int64_t w : windows) ds.window(w, seq, inputs, targets);
  const auto b = static_cast<int64_t>(windows.size());
  return {from_vector(inputs, {b, seq}).to(device), from_vector(targets, {b, seq}).to(device)};
}

// The mean cross-entropy of a batch. With --loss-parallel the model returns this
// rank's vocabulary slice of the logits, and the loss is computed on the slices.
Tensor loss_of(const Run& r, const Batch& batch) {
  Tensor logits = (*r.model)(batch.inputs);
  Tensor rows = logits.reshape({-1, logits.size(-1)}).to(DType::f32);
  if (r.c.loss_parallel) {
    return nn::tensor_parallel::vocab_parallel_cross_entropy(rows, batch.targets.reshape({-1}), *r.tp_mesh,
                                                             r.s.model.vocab_size);
  }
  return cross_entropy(rows, batch.targets.reshape({-1}));
}

// The validation loss over --eval-batches micro-batches per data-parallel rank,
// averaged over the ranks (a tensor-parallel group computes one loss together).
double evaluate(Run& r) {
  const TrainConfig& c = r.c;
  autograd::NoGradGuard no_grad;
  r.model->eval();
  const int64_t n_val = r.s.val->num_windows(c.seq_len);
  double sum = 0;
  for (int64_t b = 0; b < c.eval_batches; ++b) {
    std::vector<int64_t> windows;
    for (int64_t i = 0; i < c.micro_batch; ++i) {
      windows.push_back(((r.rank / c.tp * c.eval_batches + b) * c.micro_batch + i) % n_val);
    }
    sum += loss_of(r, make_batch(*r.s.val, windows, c.seq_len, r.device)).item();
  }
  r.model->train();
  return all_reduce_avg(r.world, sum / static_cast<double>(c.eval_batches));
}

// Forward and backward of this rank's share of the step's batch, micro-batch by
// micro-batch (gradients reduced with the last one). Returns the sum of their losses.
double accumulate_gradients(Run& r, const std::vector<int64_t>& windows) {
  const TrainConfig& c = r.c;
  double loss_sum = 0;
  for (int64_t m = 0; m < c.grad_accum; ++m) {
    // Untagged allocations of forward and backward are activations (FSDP tags its own buffers).
    MemoryTagGuard tag(MemoryTag::activation);
    r.root->set_requires_gradient_sync(m == c.grad_accum - 1);
    const std::vector<int64_t> micro(windows.begin() + m * c.micro_batch, windows.begin() + (m + 1) * c.micro_batch);
    Tensor loss = loss_of(r, make_batch(*r.s.train, micro, c.seq_len, r.device));
    loss_sum += loss.item();
    (c.grad_accum > 1 ? mul(loss, 1.0 / static_cast<double>(c.grad_accum)) : loss).backward();
  }
  return loss_sum;
}

// Every data-parallel rank's sample indices of the step, in rank order (collective;
// the ranks of a tensor-parallel group share theirs: the first one's are kept).
std::vector<int64_t> global_samples(const Run& r, const std::vector<int64_t>& mine) {
  Tensor local = from_vector(mine, {static_cast<int64_t>(mine.size())});
  Tensor all = empty({local.numel() * r.world->size()}, {.dtype = DType::i64});
  r.world->all_gather_into_tensor(all, local)->wait();
  const std::vector<int64_t> every = all.to_vector<int64_t>();
  std::vector<int64_t> out;
  for (int64_t rank = 0; rank < r.world->size(); rank += r.c.tp) {
    out.insert(out.end(), every.begin() + rank * local.numel(), every.begin() + (rank + 1) * local.numel());
  }
  return out;
}

// The checkpoint a run that ends now can be resumed from.
std::string last_checkpoint(const Run& r) {
  return r.saved_step >= 0   ? r.checkpoint_dir(r.saved_step).string()
         : !r.c.resume.empty() ? r.c.resume
                               : std::string("none (this run saved none)");
}

// Rank 0: the checkpoint of `step` is refused because of the non-finite parameters `bad`.
void report_refused_checkpoint(const Run& r, int64_t step, const std::vector<NonFiniteParameter>& bad) {
  std::vector<std::string> names;
  int64_t values = 0;
  for (const auto& p : bad) {
    values += p.count;
    if (names.size() < 3) names.push_back(fmt::format("{} ({})", p.name, p.count));
  }
  if (bad.size() > names.size()) names.push_back(fmt::format("{} more", bad.size() - names.size()));
  fmt::print(stderr,
             "{}dtr-train: step {}/{}: not saving checkpoint {}: {} values of {} parameters are NaN or "
             "infinite: {}. Last checkpoint: {}. Lower --lr, or pass --save-nonfinite to save them anyway\n",
             r.line_start(), step, r.c.steps, r.checkpoint_dir(step).string(), values, bad.size(),
             fmt::join(names, ", "), last_checkpoint(r));
  r.curves.write();
  std::fflush(stderr);
}

// Checkpoint `step` is complete: it is the one to resume from; --keep-last
// removes older ones; a periodic one is announced.
void checkpoint_complete(Run& r, int64_t step, bool announce) {
  r.saved_step = step;
  if (r.rank != 0) return;
  if (r.c.keep_last > 0) {
    try {
      remove_old_checkpoints(r.out_dir / "checkpoints", step, r.c.keep_last);
    } catch (const std::exception& e) {
      fmt::print(stderr, "{}dtr-train: --keep-last: could not remove an older checkpoint: {}\n", r.line_start(),
                 e.what());
    }
  }
  if (announce) fmt::print("{}saved checkpoint {}\n", r.line_start(), r.checkpoint_dir(step).string());
}

// The checkpoint written in the background is committed once every rank's files
// are written (`wait`: waits for that); collective.
void complete_background_checkpoint(Run& r, bool wait) {
  if (r.writing_step < 0) return;
  DTR_PROFILE_SCOPE("checkpoint", wait ? "wait for the background write" : "poll the background write");
  const auto committed = wait ? checkpoint::wait_async_save() : checkpoint::poll_async_save();
  if (!committed) return;
  checkpoint_complete(r, std::exchange(r.writing_step, -1), /*announce=*/true);
}

// Saves the checkpoint of `step` (in the background when `background`: complete
// at a later step); refuses (false, on every rank) when parameters are not
// finite, unless --save-nonfinite.
bool save_checkpoint(Run& r, int64_t step, bool background = false) {
  complete_background_checkpoint(r, /*wait=*/true);  // one at a time, and the last one named right
  DTR_PROFILE_SCOPE("checkpoint", background ? "copy for the background write" : "save");
  if (!r.c.save_nonfinite) {
    const std::vector<NonFiniteParameter> bad = nonfinite_parameters(*r.model, r.world);
    if (!bad.empty()) {
      if (r.rank == 0) report_refused_checkpoint(r, step, bad);
      return false;
    }
  }
  save_training_checkpoint(r.checkpoint_dir(step), *r.model, *r.opt, step, *r.s.sampler, r.trained_as, background);
  if (background) {
    r.writing_step = step;
  } else {
    checkpoint_complete(r, step, /*announce=*/false);
  }
  return true;
}

// The checkpoints due after `step`: every --ckpt-every steps (in the background
// with --async-ckpt), and the final one. False when one was refused.
bool save_due_checkpoints(Run& r, int64_t step, bool last) {
  const bool periodic = r.c.ckpt_every > 0 && step % r.c.ckpt_every == 0;
  if (!periodic && !(last && r.c.final_checkpoint)) return true;
  const bool background = r.c.async_checkpoint && !last;
  if (!save_checkpoint(r, step, background)) return false;
  if (periodic && !background && r.rank == 0) {
    fmt::print("{}saved checkpoint {}\n", r.line_start(), r.checkpoint_dir(step).string());
  }
  return true;
}

// Rank 0: step `step` (1-based) has a non-finite loss or gradient norm and --on-nonfinite stop ends the run.
void report_nonfinite_step(const Run& r, int64_t step, double loss, double grad_norm) {
  r.curves.write();
  fmt::print(stderr,
             "{}dtr-train: step {}/{}: the {} not finite (loss {}, gradient norm {}); stopped without "
             "updating the parameters. Last checkpoint: {}. Lower --lr or --warmup, or pass --on-nonfinite "
             "skip to drop such steps\n",
             r.line_start(), step, r.c.steps,
             std::isfinite(loss)        ? "gradient norm is"
             : std::isfinite(grad_norm) ? "loss is"
                                        : "loss and the gradient norm are",
             loss, grad_norm, last_checkpoint(r));
  std::fflush(stderr);
}

// Steps the optimizer, or drops the update of a non-finite step (--on-nonfinite skip).
void update(Run& r, bool finite, double loss) {
  if (finite) {
    r.opt->step();
    if (r.updated++ == 0) r.first_loss = loss;
    r.last_loss = loss;
  } else {
    r.opt->zero_grad();
    ++r.skipped;
  }
}

// The throughput of `record`: `tokens` processed in `seconds`.
void set_throughput(const Run& r, StepRecord& record, int64_t tokens, double seconds) {
  record.tokens_per_second = static_cast<double>(tokens) / seconds;
  record.flops_per_second = record.tokens_per_second * r.flops_per_token;
  if (r.device.is_cuda()) record.mfu = record.flops_per_second / (r.c.peak_tflops * 1e12);
}

// The step's metrics row, plot and progress line (every --log-every steps, with the
// peak memory of every rank; a progress bar in between on a terminal).
void report_step(Run& r, const StepRecord& record, bool last) {
  const bool log = record.step % r.c.log_every == 0 || record.step == 1 || last;
  RankPeaks peaks;
  if (log) peaks = gather_peaks(r.world, r.device);  // collective: every rank at the same steps
  if (r.rank != 0) return;
  r.curves.add(record);
  r.metrics->write(record);
  if (record.val_loss) r.curves.write();
  if (log) {
    // Average throughput since the start over the recent past is steadier than one step's.
    StepRecord shown = record;
    set_throughput(r, shown, r.tokens_per_step * (record.step - r.start_step), record.elapsed_seconds);
    fmt::print("{}{}\n", r.line_start(), progress_line(shown, peaks));
  } else if (r.tty) {
    fmt::print("\r\033[K{}", progress_bar(record.step, r.c.steps));
  }
  std::fflush(stdout);
}

// Every rank saw the same stop signal in the step's consensus: save the checkpoint
// of `step` (unless just saved), report, and end the run.
int stop_by_signal(Run& r, int64_t step) {
  const auto dir = r.checkpoint_dir(step);
  complete_background_checkpoint(r, /*wait=*/true);
  if (r.saved_step != step && !save_checkpoint(r, step)) return 1;
  if (r.rank == 0) {
    r.curves.write();
    const int own = stop_signal();
    fmt::print("{}stopped by {} after step {}/{}: saved checkpoint {}; continue with --resume {}\n", r.line_start(),
               own != 0 ? stop_signal_name(own) : "a signal on another rank", step, r.c.steps, dir.string(),
               dir.string());
    std::fflush(stdout);
  }
  return 0;
}

// The bytes this rank sent in the job's groups, within its host and across hosts,
// since the previous call.
mesh::LinkBytes bytes_sent_since_last_count(Run& r) {
  const mesh::LinkBytes sent = mesh::sent_by_link(r.comm_groups);
  return sent - std::exchange(r.counted_sent, sent);
}

// Step `step` (0-based) and the work due after it. Returns the exit code when the run ends here.
std::optional<int> train_step(Run& r, int64_t step) {
  const TrainConfig& c = r.c;
  const auto t0 = Clock::now();
  const double lr = nn::optim::apply_lr_schedule(*r.opt, r.schedule, step);
  const std::vector<int64_t> windows = r.s.sampler->next();
  complete_background_checkpoint(r, /*wait=*/false);  // a checkpoint written by now counts from here
  r.opt->zero_grad();
  const double loss_sum = accumulate_gradients(r, windows);
  const double grad_norm =
      nn::optim::clip_grad_norm_(r.params, c.grad_clip > 0 ? c.grad_clip : std::numeric_limits<double>::infinity());
  // The loss and the gradient norm are global, the same on every rank, so every
  // rank takes the same branch below.
  const mesh::LinkBytes sent = bytes_sent_since_last_count(r);
  const StepConsensus consensus = step_consensus(r.world, loss_sum / static_cast<double>(c.grad_accum), stop_signal(),
                                                 sent.within_host, sent.across_hosts);
  const double loss = consensus.loss;
  const bool finite = std::isfinite(loss) && std::isfinite(grad_norm);
  if (!finite && c.on_nonfinite == OnNonfinite::stop) {
    complete_background_checkpoint(r, /*wait=*/true);
    if (r.rank == 0) report_nonfinite_step(r, step + 1, loss, grad_norm);
    return 1;
  }
  update(r, finite, loss);
  StepRecord record{.step = step + 1, .total_steps = c.steps, .loss = loss, .lr = lr, .grad_norm = grad_norm,
                    .tokens = r.tokens_per_step, .skipped = !finite,
                    .comm_bytes_within_host = consensus.sent_within_host,
                    .comm_bytes_across_hosts = consensus.sent_across_hosts};
  if (c.log_samples) record.samples = global_samples(r, windows);
  record.step_seconds = seconds_since(t0);
  const bool last = step + 1 == c.steps;
  // Checkpoints first, so that no failure of the evaluation (or, after the last
  // step, of the sample) can cost them.
  if (!save_due_checkpoints(r, step + 1, last)) return 1;
  if ((c.eval_every > 0 && (step + 1) % c.eval_every == 0) || last) record.val_loss = evaluate(r);
  record.elapsed_seconds = seconds_since(r.start);
  set_throughput(r, record, r.tokens_per_step, record.step_seconds);
  report_step(r, record, last);
  if (consensus.stop) return stop_by_signal(r, step + 1);
  return std::nullopt;
}

}  // namespace

std::optional<int> run_training_loop(Run& r) {
  r.start = Clock::now();
  for (int64_t step = r.start_step; step < r.c.steps; ++step) {
    DTR_PROFILE_SCOPE("train", "step");
    if (const std::optional<int> exit_code = train_step(r, step)) {
      complete_background_checkpoint(r, /*wait=*/true);
      return exit_code;
    }
  }
  complete_background_checkpoint(r, /*wait=*/true);  // with --no-final-checkpoint, the last periodic one
  return std::nullopt;
}

}  // namespace dtr::train
