#include "trainer.h"

#include "consensus.h"
#include "embedded_corpus.h"
#include "generate.h"
#include "run_state.h"
#include "stop_signal.h"
#include "svg_plot.h"
#include "terminal.h"
#include "training_loop.h"

#include "dtr/base/log.h"
#include "dtr/checkpoint/checkpoint.h"
#include "dtr/checkpoint/hf_config.h"
#include "dtr/checkpoint/hf_weights.h"
#include "dtr/dtensor/shard_collectives.h"
#include "dtr/fsdp/reshard_after_forward.h"
#include "dtr/fsdp/summary.h"
#include "dtr/kernels/cpu/cpu_level.h"
#include "dtr/mesh/distributed.h"
#include "dtr/nn/activation_checkpoint.h"
#include "dtr/nn/optim/weight_decay_groups.h"
#include "dtr/nn/tensor_parallel/transformer_plan.h"
#include "dtr/tensor/profiler.h"
#include "dtr/tensor/random.h"

#ifdef DTR_WITH_CUDA
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

#include <fmt/format.h>
#include <fmt/ranges.h>


#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <variant>

namespace dtr::train {

namespace {

// "2 hosts, FSDP over 4 ranks", "2 hosts, HSDP: replicate 2 x shard 2", or with
// --tp "1 host, FSDP over 2 ranks x tensor parallel 2 (sequence parallel, loss parallel)".
std::string hosts_and_mesh(const mesh::DeviceMesh& dp_mesh, const TrainConfig& c) {
  const int hosts = distributed::num_hosts();
  const std::string where = fmt::format("{} host{}", hosts, hosts == 1 ? "" : "s");
  const std::string with_tp = c.tp == 1 ? "" : fmt::format(" x {}", tensor_parallel_text(c));
  if (dp_mesh.ndim() == 1) return fmt::format("{}, FSDP over {} ranks{}", where, dp_mesh.size(), with_tp);
  return fmt::format("{}, HSDP: replicate {} x shard {}{}", where, dp_mesh.size(0), dp_mesh.size(1), with_tp);
}

// The job's mesh: (dp) for FSDP, (replicate = hosts, shard = ranks per host) for
// --hsdp, each with a tp dim after it for --tp (innermost: consecutive ranks, within a host).
mesh::DeviceMesh job_mesh(const TrainConfig& c, DeviceType type) {
  if (c.hsdp) return mesh::init_hsdp_mesh(type, c.tp);
  return c.tp == 1 ? mesh::init_device_mesh(type, {c.world_size}, {"dp"})
                   : mesh::init_device_mesh(type, {c.data_parallel, c.tp}, {"dp", "tp"});
}

TokenDataset open_data(const TrainConfig& c) {
  if (c.data.empty()) {
    const std::string_view corpus = embedded_corpus();
    return TokenDataset::from_memory(corpus.data(), static_cast<int64_t>(corpus.size()), TokenFormat::bytes,
                                     "embedded corpus (data/corpus.txt)");
  }
  try {
    return TokenDataset::open(c.data, c.data_format);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("--data: {}", e.what()));
  }
}

// The model shape: --init-from's config (which must fit the data and --seq-len), or --model's.
nn::TransformerConfig model_shape(const TrainConfig& c, const TokenDataset& data) {
  if (c.init_from.empty()) {
    try {
      return model_config(c.model, data.vocab_size());
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("--model: {}", e.what()));
    }
  }
  nn::TransformerConfig model;
  try {
    model = checkpoint::read_hf_config(c.init_from);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("--init-from: {}", e.what()));
  }
  if (model.vocab_size < data.vocab_size()) {
    throw std::runtime_error(fmt::format("--init-from {}: the model's vocabulary ({}) is smaller than the data's ({})",
                                         c.init_from, model.vocab_size, data.vocab_size()));
  }
  if (c.seq_len > model.max_seq_len) {
    throw std::runtime_error(fmt::format("--seq-len {} exceeds the longest sequence of the model in {} ({})",
                                         c.seq_len, c.init_from, model.max_seq_len));
  }
  return model;
}

// Throws when this node cannot compute on --device.
void require_device(ComputeDevice device) {
  switch (device) {
    case ComputeDevice::cpu:
      return;
    case ComputeDevice::cuda:
#ifdef DTR_WITH_CUDA
      if (cuda::device_count() == 0) throw std::runtime_error("--device cuda: no CUDA GPU found on this node");
      return;
#else
      throw std::runtime_error("--device cuda: this build of dtr has no CUDA (configure with -DDTR_CUDA=ON)");
#endif
  }
}

// Everything the job needs before any collective, found identically on every rank;
// resolves c.seq_len.
Setup local_setup(TrainConfig& c, int rank) {
  Setup s;
  s.data = open_data(c);
  s.model = model_shape(c, *s.data);
  require_device(c.device);
  c.seq_len = c.seq_len > 0 ? c.seq_len : s.model.max_seq_len;
  const int64_t seq = c.seq_len;
  if (c.init_from.empty()) s.model.max_seq_len = seq;  // a pretrained model keeps its own (GPT-2: its positions)
  check_tensor_parallel(c, s.model, seq);
  auto [train, val] = s.data->split(c.val_fraction);
  s.train = train;
  s.val = val;
  const int64_t n_train = s.train->num_windows(seq), n_val = s.val->num_windows(seq);
  if (n_train < c.global_batch) {
    throw std::runtime_error(fmt::format(
        "--seq-len {} / --global-batch {}: the training split ({} tokens) holds only {} sequences of {} tokens, "
        "fewer than one global batch",
        seq, c.global_batch, s.train->size(), n_train, seq + 1));
  }
  if (n_val < 1) {
    throw std::runtime_error(fmt::format("--val-fraction {}: the validation split ({} tokens) holds no sequence of {} tokens",
                                         c.val_fraction, s.val->size(), seq + 1));
  }
  // A tensor-parallel group (--tp consecutive ranks) takes one data-parallel rank's samples.
  s.sampler.emplace(n_train, c.global_batch, static_cast<int>(rank / c.tp), static_cast<int>(c.data_parallel), c.seed);
  return s;
}

TrainedAs trained_as(const TrainConfig& c, const Setup& s) {
  return {.model_config = to_json(s.model),
          .run_settings = {{"global_batch", c.global_batch},
                           {"seq_len", c.seq_len},
                           {"seed", c.seed},
                           {"data", s.data->name()},
                           {"data_tokens", s.data->size()},
                           {"val_fraction", c.val_fraction},
                           {"mixed_precision", to_string(c.mixed_precision)},
                           {"world_size", c.world_size},
                           {"tp", c.tp}}};
}

// The compute device: this rank's GPU (distributed::init bound it from the local rank), or the CPU.
Device compute_device(ComputeDevice device) {
  switch (device) {
    case ComputeDevice::cpu:
      break;
    case ComputeDevice::cuda:
#ifdef DTR_WITH_CUDA
      return Device::cuda(cuda::current_device());
#else
      break;  // refused by local_setup
#endif
  }
  return Device::cpu();
}

// Set-up, agreed on by every rank: the data and the model shape, the output
// directory, and a resumed checkpoint's record. Returns 2 when any rank found bad input.
std::optional<int> set_up(Run& r) {
  TrainConfig& c = r.c;
  if (failed_on_any_rank(r.world, "setup", [&] { r.s = local_setup(c, r.rank); })) return 2;
  // The output directory: this job's alone (rank 0 holds its lock to the end), and
  // an earlier run's checkpoints are not silently replaced.
  if (failed_on_any_rank(r.world, "--out", [&] {
        if (r.rank != 0) return;
        r.out_lock.emplace(c.out_dir);
        claim_checkpoints(c.out_dir, !c.resume.empty(), c.overwrite);
      })) {
    return 2;
  }
  // Every rank writes its part of each checkpoint into --out: refuse node-local
  // disks now rather than at the first save.
  if (failed_on_any_rank(r.world, "--out", [&] { checkpoint::require_shared_directory(c.out_dir, "--out"); })) return 2;
  // A resumed checkpoint must be of this model, and of these run settings unless
  // --allow-config-change (checked before anything is built).
  r.trained_as = trained_as(c, r.s);
  if (!c.resume.empty()) {
    std::vector<std::string> changes;
    if (failed_on_any_rank(r.world, "--resume",
                           [&] { changes = check_trained_as(c.resume, r.trained_as, c.allow_config_change); })) {
      return 2;
    }
    if (r.rank == 0 && !changes.empty()) fmt::print("resuming with changed settings: {}\n", fmt::join(changes, "; "));
  }
  r.device = compute_device(c.device);
  r.out_dir = c.out_dir;
  if (r.rank == 0) std::filesystem::create_directories(r.out_dir);
  return std::nullopt;
}

fsdp::MixedPrecisionPolicy mixed_precision_policy(MixedPrecision mixed_precision) {
  switch (mixed_precision) {
    case MixedPrecision::none:
      break;
    case MixedPrecision::bf16:
      return {.param_dtype = DType::bf16, .reduce_dtype = DType::f32};
  }
  return {};
}

// The model: built on meta, [activation checkpointing,] fully_shard per block and
// at the root, then materialised on the compute device (not yet initialised).
void build_model(Run& r) {
  const TrainConfig& c = r.c;
  r.model_name = c.init_from.empty() ? to_string(c.model) : c.init_from;
  r.s.model.device = Device::meta();
  r.model = std::make_shared<nn::Transformer>(r.s.model);
  r.num_params = r.model->num_parameters();
  if (c.activation_checkpointing) {
    nn::apply_activation_checkpointing(
        *r.model, [](const nn::Module& m) { return dynamic_cast<const nn::TransformerBlock*>(&m) != nullptr; });
  }
  const fsdp::MixedPrecisionPolicy mp = mixed_precision_policy(c.mixed_precision);
  // The mesh on the compute device (the model is on meta here, so fully_shard
  // cannot tell): NCCL or MPI staging for cuda. --tp: the blocks split over the
  // tp dim first, then FSDP shards the split tensors over the data-parallel dims.
  const mesh::DeviceMesh mesh = job_mesh(c, r.device.type);
  r.dp_mesh = c.tp == 1 ? mesh
              : c.hsdp  ? mesh[std::vector<std::string>{"replicate", "shard"}]
                        : mesh["dp"];
  r.comm_groups = {r.world};
  for (int d = 0; d < mesh.ndim(); ++d) r.comm_groups.push_back(mesh.group(d));
  // Mixed precision's reduce dtype applies to the tensor-parallel gradient sums too.
  if (c.tp > 1) {
    r.tp_mesh = mesh["tp"];
    nn::tensor_parallel::parallelize_transformer(*r.model, *r.tp_mesh, tensor_parallel_plan(c, mp.reduce_dtype));
  }
  // --reshard-after-forward host: the post-forward groups are the ranks of the
  // shard dim on one host (hpZ).
  std::variant<bool, int> reshard = c.reshard_after_forward;
  if (c.reshard_to_host) reshard = fsdp::reshard_to_host_size(r.dp_mesh);
  const fsdp::QuantizedCommPolicy quantized{.weights = c.quantize_weights,
                                            .gradient_bits = static_cast<int>(c.quantize_grads)};
  for (auto& layer : r.model->layers()) {
    fsdp::fully_shard(*layer, {.mesh = r.dp_mesh, .reshard_after_forward = reshard, .mp_policy = mp,
                               .quantized_comm = quantized});
  }
  r.root.emplace(fsdp::fully_shard(*r.model, {.mesh = r.dp_mesh, .mp_policy = mp, .quantized_comm = quantized}));
  // The groups FSDP split off (hosts, post-forward groups) count in the bytes too.
  for (auto& group : fsdp::process_groups(*r.model)) r.comm_groups.push_back(group);
  r.model->to_empty(r.device);
}

// The parameters' first values: a fresh initialisation from --seed, or --init-from's
// weights. Returns 2 when loading those failed on any rank.
std::optional<int> initialise_parameters(Run& r) {
  manual_seed(r.c.seed);
  if (r.c.init_from.empty()) {
    r.model->reset_parameters();
  } else if (failed_on_any_rank(r.world, "--init-from",
                                [&] { checkpoint::load_hf_pretrained(*r.model, r.c.init_from); })) {
    return 2;
  }
  if (r.rank == 0) DTR_LOG_INFO("model summary (shards of rank 0):\n{}", fsdp::summarize(*r.model).to_string());
  return std::nullopt;
}

// AdamW, with weight decay on matrices only (weight_decay_groups), as GPT-2 and
// Llama train, and the learning rate schedule.
void make_optimizer(Run& r) {
  const TrainConfig& c = r.c;
  r.params = r.model->parameters();
  r.opt.emplace(nn::optim::weight_decay_groups(r.params, c.weight_decay),
                nn::optim::AdamWOptions{.lr = c.lr, .weight_decay = c.weight_decay});
  switch (c.schedule) {
    case Schedule::cosine:
      r.schedule = nn::optim::warmup_cosine(
          {.peak_lr = c.lr, .min_lr = c.min_lr, .warmup_steps = c.warmup, .total_steps = c.steps});
      break;
    case Schedule::constant:
      r.schedule = nn::optim::warmup_linear(
          {.peak_lr = c.lr, .min_lr = c.lr, .warmup_steps = c.warmup, .total_steps = c.steps});
      break;
  }
}

// --resume: the model, optimizer, data position and RNG of the checkpoint. Returns
// 0 when the checkpoint is already at --steps.
std::optional<int> resume(Run& r) {
  const TrainConfig& c = r.c;
  if (c.resume.empty()) return std::nullopt;
  r.start_step = load_training_checkpoint(c.resume, *r.model, *r.opt, *r.s.sampler);
  if (r.rank == 0) fmt::print("resumed from {} after step {}\n", c.resume, r.start_step);
  if (r.start_step < c.steps) return std::nullopt;  // every rank read the same step
  if (r.rank == 0) {
    fmt::print("nothing to train: {} is after step {} and --steps is {}; give a larger --steps to continue\n",
               c.resume, r.start_step, c.steps);
    std::fflush(stdout);
  }
  return 0;
}

// config.json: the flags with every default resolved, the model shape and the data's sizes.
void write_resolved_config(const Run& r) {
  nlohmann::json resolved = to_json(r.c);
  resolved["model_config"] = to_json(r.s.model);
  resolved["num_parameters"] = r.num_params;
  resolved["train_tokens"] = r.s.train->size();
  resolved["val_tokens"] = r.s.val->size();
  resolved["data_vocab_size"] = r.s.data->vocab_size();
  write_file_atomic((r.out_dir / "config.json").string(), resolved.dump(2) + "\n");
}

// The run's first lines: model, mesh, data, batch, optimizer and output.
// "true", "false", or with --reshard-after-forward host "host (hpZ: blocks keep
// 1/2 after forward, backward all-gathers within each host)".
std::string reshard_description(const Run& r) {
  if (!r.c.reshard_to_host) return r.c.reshard_after_forward ? "true" : "false";
  const int k = fsdp::reshard_to_host_size(r.dp_mesh), n = static_cast<int>(r.dp_mesh.size(r.dp_mesh.ndim() - 1));
  if (k == n) return fmt::format("host (the {} ranks of the shard dim share one host: a full reshard)", n);
  return fmt::format("host (hpZ: blocks keep 1/{} after forward, backward all-gathers within each host)", k);
}

// ", quantized communication between hosts: weights int8, gradients int4 (2 hosts
// of 2 ranks)" when asked for; empty when not.
std::string quantized_comm_description(const Run& r) {
  const TrainConfig& c = r.c;
  if (!c.quantize_weights && c.quantize_grads == 0) return {};
  std::vector<std::string> parts;
  if (c.quantize_weights) parts.emplace_back("weights int8");
  if (c.quantize_grads != 0) parts.push_back(fmt::format("gradients int{}", c.quantize_grads));
  const int k = fsdp::reshard_to_host_size(r.dp_mesh), n = static_cast<int>(r.dp_mesh.size(r.dp_mesh.ndim() - 1));
  if (k == n) {
    return fmt::format(", quantized communication between hosts: {} asked for, but the {} ranks of the shard dim "
                       "share one host (nothing quantized)", fmt::join(parts, ", "), n);
  }
  return fmt::format(", quantized communication between hosts: {} ({} hosts of {} ranks)", fmt::join(parts, ", "),
                     n / k, k);
}

void print_banner(const Run& r) {
  const TrainConfig& c = r.c;
  const nn::TransformerConfig& m = r.s.model;
  fmt::print("dtr-train: model {} ({} style, {:.2f}M parameters, dim {}, {} layers) on {} rank(s) ({}); data {} "
             "({} train / {} val tokens, vocab {})\n"
             "  {} steps x {} sequences x {} tokens (micro-batch {}, grad accumulation {}), lr {} {} warmup {}, "
             "mixed precision {}, activation checkpointing {}, reshard_after_forward {}{}; CPU kernels {}; "
             "output in {}\n",
             r.model_name, to_string(m.style), static_cast<double>(r.num_params) / 1e6, m.dim, m.n_layers,
             c.world_size, hosts_and_mesh(r.dp_mesh, c), r.s.data->name(), r.s.train->size(), r.s.val->size(),
             m.vocab_size, c.steps, c.global_batch, c.seq_len, c.micro_batch, c.grad_accum, c.lr,
             to_string(c.schedule), c.warmup, to_string(c.mixed_precision),
             c.activation_checkpointing ? "on" : "off", reshard_description(r), quantized_comm_description(r),
             kernels::cpu::cpu_level_description(), r.out_dir.string());
  std::fflush(stdout);
}

// What the reports need; on rank 0: config.json, metrics.jsonl (a resumed run
// keeps its rows up to start_step, and its curves), the banner.
void start_reports(Run& r) {
  const TrainConfig& c = r.c;
  r.tokens_per_step = c.global_batch * c.seq_len;
  r.flops_per_token = model_flops_per_token(r.num_params, r.s.model, c.seq_len);
  r.tty = r.rank == 0 && shows_progress_bar(c.progress_bar, probe_stdout());
  if (r.rank != 0) return;
  write_resolved_config(r);
  r.metrics.emplace((r.out_dir / "metrics.jsonl").string(), r.start_step);
  print_banner(r);
  r.curves = LossCurves((r.out_dir / "loss.svg").string(), fmt::format("dtr-train {}: loss per step", r.model_name));
  for (const LoggedStep& logged : r.metrics->kept()) r.curves.add(logged);
}

// --export-hf: the trained model as a Hugging Face directory. False when that failed on any rank.
bool export_hf(const Run& r) {
  if (failed_on_any_rank(r.world, "--export-hf", [&] { checkpoint::save_hf_pretrained(*r.model, r.c.export_hf); })) {
    return false;
  }
  if (r.rank == 0) fmt::print("exported the model for Hugging Face transformers to {}\n", r.c.export_hf);
  return true;
}

void print_summary(const Run& r, double elapsed, const std::string& final_dir) {
  const TrainConfig& c = r.c;
  fmt::print("done: {} steps{} in {}, loss {:.4f} -> {:.4f}, val loss {:.4f}, {:.0f} tokens/s; wrote {}, {}, {}{}\n",
             c.steps, r.skipped > 0 ? fmt::format(" ({} skipped: non-finite loss or gradient norm)", r.skipped) : "",
             format_duration(elapsed), r.first_loss, r.last_loss, r.curves.last_val_loss(),
             static_cast<double>(r.tokens_per_step * (c.steps - r.start_step)) / elapsed,
             (r.out_dir / "metrics.jsonl").string(), r.curves.path(), (r.out_dir / "config.json").string(),
             final_dir.empty() ? "" : ", checkpoint " + final_dir);
  std::fflush(stdout);
}

// With --loss-parallel: gathers one position's logits from the vocabulary slices
// of the tensor-parallel group (uneven slices as the head splits them).
std::function<Tensor(const Tensor&)> whole_vocabulary(const Run& r) {
  if (!r.c.loss_parallel) return {};
  return [group = r.tp_mesh->group(0), vocab = r.s.model.vocab_size](const Tensor& slice) {
    return dtensor::all_gather_dim(slice, *group, 0, vocab);
  };
}

// Every rank runs the same generation steps (the forward is collective); rank 0 prints the text.
void print_sample(Run& r) {
  const TrainConfig& c = r.c;
  std::vector<int64_t> prompt;
  if (r.s.data->vocab_size() <= 256 && !c.prompt.empty()) {
    for (const char ch : c.prompt) prompt.push_back(static_cast<unsigned char>(ch));
  } else {
    for (int64_t i = 0; i < std::min<int64_t>(8, r.s.val->size()); ++i) prompt.push_back(r.s.val->token(i));
  }
  const auto tokens = generate(*r.model, prompt,
                               {.max_new_tokens = c.sample_tokens, .top_k = c.top_k, .temperature = c.temperature,
                                .seed = c.seed, .context = c.seq_len, .device = r.device,
                                .length_multiple = c.sequence_parallel ? c.tp : 1,
                                .whole_vocabulary = whole_vocabulary(r)},
                               r.world);
  if (r.rank == 0) {
    fmt::print("sample ({}, {} tokens):\n{}\n", c.top_k > 0 ? fmt::format("top-{} sampling", c.top_k) : "greedy",
               c.sample_tokens, decode_tokens(tokens, r.s.data->vocab_size()));
    std::fflush(stdout);
  }
}

// After the last step: the profile, --export-hf, the plot and summary, the sample.
int finish(Run& r) {
  const double elapsed = seconds_since(r.start);
  // The final checkpoint, <out>/checkpoints/step_<steps> like the periodic ones, saved
  // with the last step (not when this run took no step).
  const std::string final_dir = r.c.final_checkpoint ? r.checkpoint_dir(r.c.steps).string() : "";
  end_graceful_stop();  // from here on (the sample) a signal ends the process at once
  profiler::stop();     // --profile or DTR_PROFILE: write the traces, rank 0 prints the top spans
  if (!r.c.export_hf.empty() && !export_hf(r)) return 1;
  if (r.rank == 0) {
    r.curves.write();
    print_summary(r, elapsed, final_dir);
  }
  if (r.c.sample_tokens > 0) print_sample(r);
  return 0;
}

}  // namespace

int run_training(TrainConfig config) {
  if (!config.profile.empty()) profiler::start({.path = config.profile});  // stopped after the last step
  Run run{.c = std::move(config), .rank = distributed::rank(), .world = distributed::world_group()};
  if (const std::optional<int> exit_code = set_up(run)) return *exit_code;
  build_model(run);
  if (const std::optional<int> exit_code = initialise_parameters(run)) return *exit_code;
  make_optimizer(run);
  if (const std::optional<int> exit_code = resume(run)) return *exit_code;
  start_reports(run);
  if (const std::optional<int> exit_code = run_training_loop(run)) return *exit_code;
  return finish(run);
}

}  // namespace dtr::train
