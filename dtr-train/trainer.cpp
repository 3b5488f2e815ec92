#include "trainer.h"

#include "dataset.h"
#include "embedded_corpus.h"
#include "generate.h"
#include "metrics.h"
#include "output_dir.h"
#include "sampler.h"
#include "stop_signal.h"
#include "svg_plot.h"
#include "train_checkpoint.h"

#include "dtr/base/log.h"
#include "dtr/checkpoint/checkpoint.h"
#include "dtr/checkpoint/hf_config.h"
#include "dtr/checkpoint/hf_weights.h"
#include "dtr/fsdp/fully_shard.h"
#include "dtr/fsdp/summary.h"
#include "dtr/kernels/cpu/cpu_level.h"
#include "dtr/mesh/device_mesh.h"
#include "dtr/mesh/distributed.h"
#include "dtr/nn/activation_checkpoint.h"
#include "dtr/nn/optim/clip_grad.h"
#include "dtr/nn/optim/fused_adamw.h"
#include "dtr/nn/optim/lr_schedule.h"
#include "dtr/nn/optim/weight_decay_groups.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/profiler.h"
#include "dtr/tensor/random.h"

#ifdef DTR_WITH_CUDA
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>

namespace dtr::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// "2 hosts, FSDP over 4 ranks" or "2 hosts, HSDP: replicate 2 x shard 2".
std::string hosts_and_mesh(const mesh::DeviceMesh& mesh) {
  const int hosts = distributed::num_hosts();
  const std::string where = fmt::format("{} host{}", hosts, hosts == 1 ? "" : "s");
  if (mesh.ndim() == 1) return fmt::format("{}, FSDP over {} ranks", where, mesh.size());
  return fmt::format("{}, HSDP: replicate {} x shard {}", where, mesh.size(0), mesh.size(1));
}

double all_reduce_avg(const mesh::ProcessGroupPtr& group, double value) {
  Tensor t = full({1}, value, {.dtype = DType::f64});
  group->all_reduce(t, mesh::ReduceOp::avg())->wait();
  return t.item();
}

// The step's loss averaged over the ranks, and whether any rank has a stop signal
// pending: one all-reduce (sum) of {loss, signal number}.
struct StepConsensus {
  double loss = 0;
  bool stop = false;
};

StepConsensus step_consensus(const mesh::ProcessGroupPtr& group, double local_loss, int signal) {
  Tensor t = from_vector(std::vector<double>{local_loss, static_cast<double>(signal)}, {2});
  group->all_reduce(t, mesh::ReduceOp::sum())->wait();
  const std::vector<double> v = t.to_vector<double>();
  return {v[0] / static_cast<double>(group->size()), v[1] > 0};
}

// True on every rank when `failed` is true on any rank.
bool any_rank(const mesh::ProcessGroupPtr& group, bool failed) {
  Tensor t = full({1}, failed ? 1.0 : 0.0, {.dtype = DType::f64});
  group->all_reduce(t, mesh::ReduceOp::max())->wait();
  return t.item() > 0;
}

// Runs `check` on every rank and agrees on it: true on every rank when it threw on
// any, and then rank 0 prints the error (its own, else that of `what` elsewhere).
bool failed_on_any_rank(const mesh::ProcessGroupPtr& group, const char* what, const std::function<void()>& check) {
  std::string error;
  try {
    check();
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!any_rank(group, !error.empty())) return false;
  if (group->rank() == 0) {
    const std::string message = error.empty() ? fmt::format("{} failed on another rank", what) : error;
    std::fprintf(stderr, "dtr-train: %s\n", message.c_str());
  }
  return true;
}

RankPeaks gather_peaks(const mesh::ProcessGroupPtr& group, Device device) {
  const MemoryStats stats = memory_stats(device);
  std::vector<double> mine(6);
  for (size_t t = 0; t < 6; ++t) mine[t] = static_cast<double>(stats.by_tag[t].peak_bytes);
  Tensor in = from_vector(mine, {6});
  Tensor out = empty({group->size() * 6}, {.dtype = DType::f64});
  group->all_gather_into_tensor(out, in)->wait();
  const std::vector<double> all = out.to_vector<double>();
  RankPeaks peaks(static_cast<size_t>(group->size()));
  for (size_t r = 0; r < peaks.size(); ++r) {
    for (size_t t = 0; t < 6; ++t) peaks[r][t] = static_cast<int64_t>(all[r * 6 + t]);
  }
  return peaks;
}

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

Tensor loss_of(nn::Module& model, const Batch& batch, int64_t vocab) {
  Tensor logits = model(batch.inputs);
  return cross_entropy(logits.reshape({-1, vocab}).to(DType::f32), batch.targets.reshape({-1}));
}

// Everything the job needs before any collective: found identically on every rank.
struct Setup {
  std::optional<TokenDataset> data, train, val;
  std::optional<DistributedSampler> sampler;
  nn::TransformerConfig model;
  int64_t seq = 0;
};

Setup local_setup(TrainConfig& c, int rank) {
  Setup s;
  if (c.data.empty()) {
    const std::string_view corpus = embedded_corpus();
    s.data = TokenDataset::from_memory(corpus.data(), static_cast<int64_t>(corpus.size()), TokenFormat::bytes,
                                       "embedded corpus (data/corpus.txt)");
  } else {
    try {
      s.data = TokenDataset::open(c.data, c.data_format);
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("--data: {}", e.what()));
    }
  }
  if (!c.init_from.empty()) {
    try {
      s.model = checkpoint::read_hf_config(c.init_from);
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("--init-from: {}", e.what()));
    }
    if (s.model.vocab_size < s.data->vocab_size()) {
      throw std::runtime_error(fmt::format("--init-from {}: the model's vocabulary ({}) is smaller than the data's ({})",
                                           c.init_from, s.model.vocab_size, s.data->vocab_size()));
    }
    if (c.seq_len > s.model.max_seq_len) {
      throw std::runtime_error(fmt::format("--seq-len {} exceeds the longest sequence of the model in {} ({})",
                                           c.seq_len, c.init_from, s.model.max_seq_len));
    }
  } else {
    try {
      s.model = model_config(c.model, s.data->vocab_size());
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("--model: {}", e.what()));
    }
  }
  if (c.device == "cuda") {
#ifdef DTR_WITH_CUDA
    if (cuda::device_count() == 0) throw std::runtime_error("--device cuda: no CUDA GPU found on this node");
#else
    throw std::runtime_error("--device cuda: this build of dtr has no CUDA (configure with -DDTR_CUDA=ON)");
#endif
  }
  s.seq = c.seq_len > 0 ? c.seq_len : s.model.max_seq_len;
  c.seq_len = s.seq;
  if (c.init_from.empty()) s.model.max_seq_len = s.seq;  // a pretrained model keeps its own (GPT-2: its positions)
  auto [train, val] = s.data->split(c.val_fraction);
  s.train = train;
  s.val = val;
  const int64_t n_train = s.train->num_windows(s.seq), n_val = s.val->num_windows(s.seq);
  if (n_train < c.global_batch) {
    throw std::runtime_error(fmt::format(
        "--seq-len {} / --global-batch {}: the training split ({} tokens) holds only {} sequences of {} tokens, "
        "fewer than one global batch",
        s.seq, c.global_batch, s.train->size(), n_train, s.seq + 1));
  }
  if (n_val < 1) {
    throw std::runtime_error(fmt::format("--val-fraction {}: the validation split ({} tokens) holds no sequence of {} tokens",
                                         c.val_fraction, s.val->size(), s.seq + 1));
  }
  s.sampler.emplace(n_train, c.global_batch, rank, c.world_size, c.seed);
  return s;
}

double evaluate(nn::Module& model, const TokenDataset& val, const TrainConfig& c, int rank,
                const mesh::ProcessGroupPtr& group, int64_t vocab, Device device) {
  autograd::NoGradGuard no_grad;
  model.eval();
  const int64_t n_val = val.num_windows(c.seq_len);
  double sum = 0;
  for (int64_t b = 0; b < c.eval_batches; ++b) {
    std::vector<int64_t> windows;
    for (int64_t i = 0; i < c.micro_batch; ++i) {
      windows.push_back(((rank * c.eval_batches + b) * c.micro_batch + i) % n_val);
    }
    sum += loss_of(model, make_batch(val, windows, c.seq_len, device), vocab).item();
  }
  model.train();
  return all_reduce_avg(group, sum / static_cast<double>(c.eval_batches));
}

TrainedAs trained_as(const TrainConfig& c, const Setup& s) {
  return {.model_config = to_json(s.model),
          .run_settings = {{"global_batch", c.global_batch},
                           {"seq_len", s.seq},
                           {"seed", c.seed},
                           {"data", s.data->name()},
                           {"data_tokens", s.data->size()},
                           {"val_fraction", c.val_fraction},
                           {"mixed_precision", c.mixed_precision},
                           {"world_size", c.world_size}}};
}

void write_plot(const std::string& path, const std::vector<std::pair<double, double>>& train,
                const std::vector<std::pair<double, double>>& val, const std::string& title) {
  write_file_atomic(path, line_plot_svg({{"train loss", "#1f77b4", train}, {"validation loss", "#d62728", val}},
                                        {.title = title}));
}

}  // namespace

int run_training(TrainConfig c) {
  if (!c.profile.empty()) profiler::start({.path = c.profile});  // stopped after the last step
  const int rank = distributed::rank();
  const mesh::ProcessGroupPtr world = distributed::world_group();

  // 1. Local setup, agreed on by every rank.
  Setup s;
  if (failed_on_any_rank(world, "setup", [&] { s = local_setup(c, rank); })) return 2;
  // The output directory: this job's alone (rank 0 holds its lock to the end), and
  // an earlier run's checkpoints are not silently replaced.
  std::optional<OutputDirLock> out_lock;
  if (failed_on_any_rank(world, "--out", [&] {
        if (rank != 0) return;
        out_lock.emplace(c.out_dir);
        claim_checkpoints(c.out_dir, !c.resume.empty(), c.overwrite);
      })) {
    return 2;
  }
  // Every rank writes its part of each checkpoint into --out: refuse node-local
  // disks now rather than at the first save.
  if (failed_on_any_rank(world, "--out", [&] { checkpoint::require_shared_directory(c.out_dir, "--out"); })) return 2;
  // A resumed checkpoint must be of this model, and of these run settings unless
  // --allow-config-change (checked before anything is built).
  const TrainedAs now = trained_as(c, s);
  if (!c.resume.empty()) {
    std::vector<std::string> changes;
    if (failed_on_any_rank(world, "--resume", [&] { changes = check_trained_as(c.resume, now, c.allow_config_change); })) {
      return 2;
    }
    if (rank == 0 && !changes.empty()) fmt::print("resuming with changed settings: {}\n", fmt::join(changes, "; "));
  }
  // The compute device: this rank's GPU (distributed::init bound it from the local rank), or the CPU.
#ifdef DTR_WITH_CUDA
  const Device device = c.device == "cuda" ? Device::cuda(cuda::current_device()) : Device::cpu();
#else
  const Device device = Device::cpu();
#endif
  const int64_t vocab = s.model.vocab_size, seq = c.seq_len;
  const std::filesystem::path out_dir = c.out_dir;
  if (rank == 0) std::filesystem::create_directories(out_dir);

  // 2. The model: meta -> [activation checkpointing] -> fully_shard -> materialise.
  const std::string model_name = c.init_from.empty() ? c.model : c.init_from;
  s.model.device = Device::meta();
  auto model = std::make_shared<nn::Transformer>(s.model);
  const int64_t num_params = model->num_parameters();
  if (c.activation_checkpointing) {
    nn::apply_activation_checkpointing(
        *model, [](const nn::Module& m) { return dynamic_cast<const nn::TransformerBlock*>(&m) != nullptr; });
  }
  fsdp::MixedPrecisionPolicy mp;
  if (c.mixed_precision == "bf16") mp = {.param_dtype = DType::bf16, .reduce_dtype = DType::f32};
  // The data-parallel mesh on the compute device (the model is on meta here, so
  // fully_shard cannot tell): NCCL or MPI staging for cuda.
  // --hsdp: (replicate = hosts, shard = ranks per host).
  const mesh::DeviceMesh dp_mesh =
      c.hsdp ? mesh::init_hsdp_mesh(device.type) : mesh::init_device_mesh(device.type, {c.world_size}, {"dp"});
  for (auto& layer : model->layers()) {
    fsdp::fully_shard(*layer, {.mesh = dp_mesh, .reshard_after_forward = c.reshard_after_forward, .mp_policy = mp});
  }
  fsdp::FSDPModule root = fsdp::fully_shard(*model, {.mesh = dp_mesh, .mp_policy = mp});
  model->to_empty(device);
  manual_seed(c.seed);
  if (c.init_from.empty()) {
    model->reset_parameters();
  } else if (failed_on_any_rank(world, "--init-from", [&] { checkpoint::load_hf_pretrained(*model, c.init_from); })) {
    return 2;
  }
  if (rank == 0) DTR_LOG_INFO("model summary (shards of rank 0):\n{}", fsdp::summarize(*model).to_string());

  const std::vector<nn::Parameter> params = model->parameters();
  // Weight decay on matrices only (weight_decay_groups), as GPT-2 and Llama train.
  nn::optim::FusedAdamW opt(nn::optim::weight_decay_groups(params, c.weight_decay),
                            {.lr = c.lr, .weight_decay = c.weight_decay});
  const nn::optim::LrSchedule schedule =
      c.schedule == "cosine"
          ? nn::optim::warmup_cosine({.peak_lr = c.lr, .min_lr = c.min_lr, .warmup_steps = c.warmup, .total_steps = c.steps})
          : nn::optim::warmup_linear({.peak_lr = c.lr, .min_lr = c.lr, .warmup_steps = c.warmup, .total_steps = c.steps});
  int64_t start_step = 0;
  if (!c.resume.empty()) {
    start_step = load_training_checkpoint(c.resume, *model, opt, *s.sampler);
    if (rank == 0) fmt::print("resumed from {} after step {}\n", c.resume, start_step);
    if (start_step >= c.steps) {  // every rank read the same step
      if (rank == 0) {
        fmt::print("nothing to train: {} is after step {} and --steps is {}; give a larger --steps to continue\n",
                   c.resume, start_step, c.steps);
        std::fflush(stdout);
      }
      return 0;
    }
  }

  const int64_t tokens_per_step = c.global_batch * seq;
  const double flops_per_token = model_flops_per_token(num_params, s.model, seq);
  const bool tty = rank == 0 && (c.progress_bar == "on" || (c.progress_bar == "auto" && isatty(STDOUT_FILENO) != 0));
  std::optional<MetricsWriter> metrics;
  if (rank == 0) {
    nlohmann::json resolved = to_json(c);
    resolved["model_config"] = to_json(s.model);
    resolved["num_parameters"] = num_params;
    resolved["train_tokens"] = s.train->size();
    resolved["val_tokens"] = s.val->size();
    resolved["data_vocab_size"] = s.data->vocab_size();
    write_file_atomic((out_dir / "config.json").string(), resolved.dump(2) + "\n");
    metrics.emplace((out_dir / "metrics.jsonl").string(), start_step);  // resuming: keeps the rows up to start_step
    fmt::print("dtr-train: model {} ({} style, {:.2f}M parameters, dim {}, {} layers) on {} rank(s) ({}); data {} "
               "({} train / {} val tokens, vocab {})\n"
               "  {} steps x {} sequences x {} tokens (micro-batch {}, grad accumulation {}), lr {} {} warmup {}, "
               "mixed precision {}, activation checkpointing {}, reshard_after_forward {}; CPU kernels {}; "
               "output in {}\n",
               model_name, s.model.style == nn::TransformerStyle::gpt2 ? "gpt2" : "llama", num_params / 1e6, s.model.dim,
               s.model.n_layers, c.world_size, hosts_and_mesh(dp_mesh), s.data->name(), s.train->size(), s.val->size(), vocab, c.steps,
               c.global_batch, seq, c.micro_batch, c.grad_accum, c.lr, c.schedule, c.warmup, c.mixed_precision,
               c.activation_checkpointing ? "on" : "off", c.reshard_after_forward,
               kernels::cpu::cpu_level_description(), out_dir.string());
    std::fflush(stdout);
  }

  // 3. Train.
  std::vector<std::pair<double, double>> train_curve, val_curve;  // the whole history, for the plot
  if (metrics) {
    for (const LoggedStep& logged : metrics->kept()) {
      if (logged.loss) train_curve.emplace_back(static_cast<double>(logged.step), *logged.loss);
      if (logged.val_loss) val_curve.emplace_back(static_cast<double>(logged.step), *logged.val_loss);
    }
  }
  const std::string plot_path = (out_dir / "loss.svg").string();
  const std::string plot_title = fmt::format("dtr-train {}: loss per step", model_name);
  const auto start = Clock::now();
  double first_loss = 0, last_loss = 0;  // of the steps that updated the parameters
  int64_t updated = 0, skipped = 0;       // steps taken, and dropped by --on-nonfinite skip
  int64_t saved_step = -1;  // the step of the last checkpoint this run wrote
  auto checkpoint_dir = [&](int64_t step) { return out_dir / "checkpoints" / fmt::format("step_{}", step); };
  auto last_checkpoint = [&] {
    return saved_step >= 0 ? checkpoint_dir(saved_step).string()
           : !c.resume.empty() ? c.resume
                               : std::string("none (this run saved none)");
  };
  // Saves the checkpoint of `step`; refuses (false, on every rank) when parameters
  // are not finite, unless --save-nonfinite.
  auto save_checkpoint = [&](int64_t step) {
    const auto dir = checkpoint_dir(step);
    if (!c.save_nonfinite) {
      const std::vector<NonFiniteParameter> bad = nonfinite_parameters(*model, world);
      if (!bad.empty()) {
        if (rank == 0) {
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
                     tty ? "\r\033[K" : "", step, c.steps, dir.string(), values, bad.size(), fmt::join(names, ", "),
                     last_checkpoint());
          write_plot(plot_path, train_curve, val_curve, plot_title);
          std::fflush(stderr);
        }
        return false;
      }
    }
    save_training_checkpoint(dir, *model, opt, step, *s.sampler, now);
    saved_step = step;
    return true;
  };
  for (int64_t step = start_step; step < c.steps; ++step) {
    DTR_PROFILE_SCOPE("train", "step");
    const auto t0 = Clock::now();
    const double lr = nn::optim::apply_lr_schedule(opt, schedule, step);
    const std::vector<int64_t> windows = s.sampler->next();
    opt.zero_grad();
    double loss_sum = 0;
    for (int64_t m = 0; m < c.grad_accum; ++m) {
      // Untagged allocations of forward and backward are activations (FSDP tags its own buffers).
      MemoryTagGuard tag(MemoryTag::activation);
      root.set_requires_gradient_sync(m == c.grad_accum - 1);
      const std::vector<int64_t> micro(windows.begin() + m * c.micro_batch, windows.begin() + (m + 1) * c.micro_batch);
      Tensor loss = loss_of(*model, make_batch(*s.train, micro, seq, device), vocab);
      loss_sum += loss.item();
      (c.grad_accum > 1 ? mul(loss, 1.0 / static_cast<double>(c.grad_accum)) : loss).backward();
    }
    const double grad_norm = nn::optim::clip_grad_norm_(
        params, c.grad_clip > 0 ? c.grad_clip : std::numeric_limits<double>::infinity());
    // The loss and the gradient norm are global, the same on every rank, so every
    // rank takes the same branch below.
    const StepConsensus consensus = step_consensus(world, loss_sum / static_cast<double>(c.grad_accum), stop_signal());
    const double loss = consensus.loss;
    const bool finite = std::isfinite(loss) && std::isfinite(grad_norm);
    if (!finite && c.on_nonfinite == "stop") {
      if (rank == 0) {
        write_plot(plot_path, train_curve, val_curve, plot_title);
        fmt::print(stderr,
                   "{}dtr-train: step {}/{}: the {} not finite (loss {}, gradient norm {}); stopped without "
                   "updating the parameters. Last checkpoint: {}. Lower --lr or --warmup, or pass --on-nonfinite "
                   "skip to drop such steps\n",
                   tty ? "\r\033[K" : "", step + 1, c.steps,
                   std::isfinite(loss)        ? "gradient norm is"
                   : std::isfinite(grad_norm) ? "loss is"
                                              : "loss and the gradient norm are",
                   loss, grad_norm, last_checkpoint());
        std::fflush(stderr);
      }
      return 1;
    }
    if (finite) {
      opt.step();
      if (updated++ == 0) first_loss = loss;
      last_loss = loss;
    } else {
      opt.zero_grad();  // --on-nonfinite skip: the update is dropped
      ++skipped;
    }

    StepRecord r{.step = step + 1, .total_steps = c.steps, .loss = loss, .lr = lr, .grad_norm = grad_norm,
                 .tokens = tokens_per_step, .skipped = !finite};
    r.step_seconds = seconds_since(t0);
    const bool last = step + 1 == c.steps;
    // Checkpoints first, so that no failure of the evaluation (or, after the last
    // step, of the sample) can cost them.
    const bool periodic = c.ckpt_every > 0 && (step + 1) % c.ckpt_every == 0;
    if (periodic || (last && c.final_checkpoint)) {
      if (!save_checkpoint(step + 1)) return 1;
      if (periodic && rank == 0) {
        fmt::print("{}saved checkpoint {}\n", tty ? "\r\033[K" : "", checkpoint_dir(step + 1).string());
      }
    }
    if ((c.eval_every > 0 && (step + 1) % c.eval_every == 0) || last) {
      r.val_loss = evaluate(*model, *s.val, c, rank, world, vocab, device);
    }
    r.elapsed_seconds = seconds_since(start);
    r.tokens_per_second = static_cast<double>(tokens_per_step) / r.step_seconds;
    r.flops_per_second = r.tokens_per_second * flops_per_token;
    if (device.is_cuda()) r.mfu = r.flops_per_second / (c.peak_tflops * 1e12);
    const bool log = (step + 1) % c.log_every == 0 || step == 0 || last;
    RankPeaks peaks;
    if (log) peaks = gather_peaks(world, device);  // collective: every rank at the same steps
    if (rank == 0) {
      if (std::isfinite(loss)) train_curve.emplace_back(static_cast<double>(r.step), loss);
      if (r.val_loss && std::isfinite(*r.val_loss)) val_curve.emplace_back(static_cast<double>(r.step), *r.val_loss);
      metrics->write(r);
      if (r.val_loss) write_plot(plot_path, train_curve, val_curve, plot_title);
      if (log) {
        // Average throughput since the start over the recent past is steadier than one step's.
        StepRecord shown = r;
        shown.tokens_per_second = static_cast<double>(tokens_per_step * (step + 1 - start_step)) / r.elapsed_seconds;
        shown.flops_per_second = shown.tokens_per_second * flops_per_token;
        if (device.is_cuda()) shown.mfu = shown.flops_per_second / (c.peak_tflops * 1e12);
        fmt::print("{}{}\n", tty ? "\r\033[K" : "", progress_line(shown, peaks));
      } else if (tty) {
        fmt::print("\r\033[K{}", progress_bar(step + 1, c.steps));
      }
      std::fflush(stdout);
    }
    if (consensus.stop) {
      // Every rank saw the same consensus: save (unless this step was just saved), report, end.
      const auto dir = checkpoint_dir(step + 1);
      if (saved_step != step + 1 && !save_checkpoint(step + 1)) return 1;
      if (rank == 0) {
        write_plot(plot_path, train_curve, val_curve, plot_title);
        const int own = stop_signal();
        fmt::print("{}stopped by {} after step {}/{}: saved checkpoint {}; continue with --resume {}\n",
                   tty ? "\r\033[K" : "", own != 0 ? stop_signal_name(own) : "a signal on another rank", step + 1,
                   c.steps, dir.string(), dir.string());
        std::fflush(stdout);
      }
      return 0;
    }
  }
  const double elapsed = seconds_since(start);
  // The final checkpoint, <out>/checkpoints/step_<steps> like the periodic ones, saved
  // with the last step (not when this run took no step).
  const std::string final_dir = c.final_checkpoint ? checkpoint_dir(c.steps).string() : "";
  end_graceful_stop();  // from here on (the sample) a signal ends the process at once
  profiler::stop();  // --profile or DTR_PROFILE: write the traces, rank 0 prints the top spans

  if (!c.export_hf.empty()) {
    if (failed_on_any_rank(world, "--export-hf", [&] { checkpoint::save_hf_pretrained(*model, c.export_hf); })) return 1;
    if (rank == 0) fmt::print("exported the model for Hugging Face transformers to {}\n", c.export_hf);
  }

  // 4. The end: plot, summary, sample.
  if (rank == 0) {
    write_plot(plot_path, train_curve, val_curve, plot_title);
    fmt::print("done: {} steps{} in {}, loss {:.4f} -> {:.4f}, val loss {:.4f}, {:.0f} tokens/s; wrote {}, {}, {}{}\n",
               c.steps, skipped > 0 ? fmt::format(" ({} skipped: non-finite loss or gradient norm)", skipped) : "",
               format_duration(elapsed), first_loss, last_loss, val_curve.empty() ? 0.0 : val_curve.back().second,
               static_cast<double>(tokens_per_step * (c.steps - start_step)) / elapsed, (out_dir / "metrics.jsonl").string(),
               plot_path, (out_dir / "config.json").string(), final_dir.empty() ? "" : ", checkpoint " + final_dir);
    std::fflush(stdout);
  }
  if (c.sample_tokens > 0) {
    std::vector<int64_t> prompt;
    if (s.data->vocab_size() <= 256 && !c.prompt.empty()) {
      for (const char ch : c.prompt) prompt.push_back(static_cast<unsigned char>(ch));
    } else {
      for (int64_t i = 0; i < std::min<int64_t>(8, s.val->size()); ++i) prompt.push_back(s.val->token(i));
    }
    const auto tokens = generate(*model, prompt,
                                 {.max_new_tokens = c.sample_tokens, .top_k = c.top_k, .temperature = c.temperature,
                                  .seed = c.seed, .context = seq, .device = device},
                                 world);
    if (rank == 0) {
      fmt::print("sample ({}, {} tokens):\n{}\n", c.top_k > 0 ? fmt::format("top-{} sampling", c.top_k) : "greedy",
                 c.sample_tokens, decode_tokens(tokens, s.data->vocab_size()));
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace dtr::train
