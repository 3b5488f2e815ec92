#include "cli.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <stdexcept>

namespace dtr::train {

namespace {

struct BadFlag : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void bad(const std::string& message) { throw BadFlag(message); }

bool parse_switch(const std::string& flag, const std::string& value) {
  if (value == "on" || value == "true" || value == "1" || value == "yes") return true;
  if (value == "off" || value == "false" || value == "0" || value == "no") return false;
  bad(fmt::format("{} must be on/off or true/false, got '{}'", flag, value));
}

// The flags with a fixed set of values, as typed; validate() parses each into
// its enum in TrainConfig. They start as the defaults' names, which --help shows.
struct ChoiceText {
  std::string model, data_format, schedule, on_nonfinite, mixed_precision, device, progress_bar;
  std::string activation_checkpointing = "off", reshard_after_forward = "true";
  bool no_final_checkpoint = false;

  explicit ChoiceText(const TrainConfig& c)
      : model(to_string(c.model)),
        data_format(to_string(c.data_format)),
        schedule(to_string(c.schedule)),
        on_nonfinite(to_string(c.on_nonfinite)),
        mixed_precision(to_string(c.mixed_precision)),
        device(to_string(c.device)),
        progress_bar(to_string(c.progress_bar)) {}
};

template <NamedEnum E>
E parse_choice(const char* flag, const std::string& value) {
  if (const std::optional<E> parsed = parse_enum<E>(value)) return *parsed;
  bad(fmt::format("{} must be {}, got '{}'", flag, names_list<E>(), value));
}

// The batch flags, and the world size and gradient accumulation they give.
void validate_batch(TrainConfig& c, int world_size) {
  if (c.plan_world_size < 0) bad(fmt::format("--world-size must be positive, got {}", c.plan_world_size));
  if (c.plan_world_size > 0) {
    if (!c.estimate_only) {
      bad("--world-size plans a job for --estimate-only; a training job runs on the ranks mpirun starts");
    }
    world_size = c.plan_world_size;
  }
  if (c.steps <= 0) bad(fmt::format("--steps must be a positive number of optimizer steps, got {}", c.steps));
  if (c.global_batch <= 0) bad(fmt::format("--global-batch must be positive, got {}", c.global_batch));
  if (c.micro_batch < 0) bad(fmt::format("--micro-batch must be positive (or 0: global / ranks), got {}", c.micro_batch));
  if (c.micro_batch == 0 && c.estimate_only) c.micro_batch = std::max<int64_t>(1, c.global_batch / world_size);
  if (c.micro_batch == 0) {
    if (c.global_batch % world_size != 0) {
      bad(fmt::format("--global-batch {} is not divisible by the number of ranks ({})", c.global_batch, world_size));
    }
    c.micro_batch = c.global_batch / world_size;
  }
  if (!c.estimate_only && c.global_batch % (static_cast<int64_t>(world_size) * c.micro_batch) != 0) {
    bad(fmt::format("--global-batch {} is not divisible by ranks ({}) x --micro-batch ({})", c.global_batch,
                    world_size, c.micro_batch));
  }
  c.grad_accum = std::max<int64_t>(1, c.global_batch / (world_size * c.micro_batch));
  c.world_size = world_size;
}

// The flags naming files and directories: checkpoints, models, data.
void validate_paths(TrainConfig& c, const ChoiceText& text) {
  if (c.ckpt_every < 0) bad(fmt::format("--ckpt-every must be >= 0, got {}", c.ckpt_every));
  if (c.overwrite && !c.resume.empty()) bad("--overwrite and --resume: pick one (--resume keeps the checkpoints)");
  if (!c.resume.empty() && !std::filesystem::exists(std::filesystem::path(c.resume) / "metadata.json")) {
    bad(fmt::format("--resume {}: no checkpoint there (no metadata.json)", c.resume));
  }
  if (!c.init_from.empty() && !std::filesystem::is_regular_file(std::filesystem::path(c.init_from) / "config.json")) {
    bad(fmt::format("--init-from {}: no config.json there (expected a Hugging Face model directory)", c.init_from));
  }
  // The same directory however written ("runs/x", "./runs/x/").
  auto directory = [](const std::string& path) {
    std::filesystem::path p = std::filesystem::weakly_canonical(path);
    return p.has_filename() ? p : p.parent_path();
  };
  if (!c.export_hf.empty() && directory(c.export_hf) == directory(c.out_dir)) {
    bad(fmt::format("--export-hf {} is --out, where dtr-train writes its own config.json; pick another directory",
                    c.export_hf));
  }
  c.model = parse_model(text.model);
  if (!c.model.preset && !std::filesystem::is_regular_file(c.model.file)) {
    bad(fmt::format("--model: unknown model '{}' (expected {} or a JSON config file)", text.model,
                    fmt::join(EnumNames<ModelPreset>::names, ", ")));
  }
  if (!c.data.empty() && std::filesystem::is_directory(c.data)) {
    bad(fmt::format("--data: {} is a directory; expected a token file (text, or an llm.c .bin shard)", c.data));
  } else if (!c.data.empty() && !std::filesystem::is_regular_file(c.data)) {
    bad(fmt::format("--data: no such file: {}", c.data));
  }
  c.data_format = parse_choice<DataFormat>("--data-format", text.data_format);
}

// The optimizer's flags and the numerics of a step.
void validate_training(TrainConfig& c, const ChoiceText& text) {
  if (!(c.val_fraction > 0 && c.val_fraction <= 0.5)) {
    bad(fmt::format("--val-fraction must be in (0, 0.5], got {}", c.val_fraction));
  }
  if (c.seq_len < 0) bad(fmt::format("--seq-len must be positive, got {}", c.seq_len));
  if (!(c.lr > 0)) bad(fmt::format("--lr must be positive, got {}", c.lr));
  if (c.min_lr < 0) c.min_lr = c.lr / 10;
  if (c.min_lr > c.lr) bad(fmt::format("--min-lr {} is above --lr {}", c.min_lr, c.lr));
  c.schedule = parse_choice<Schedule>("--schedule", text.schedule);
  if (c.warmup < 0) c.warmup = c.steps / 20;
  if (c.warmup >= c.steps) bad(fmt::format("--warmup {} must be below --steps {}", c.warmup, c.steps));
  if (!(c.weight_decay >= 0)) bad(fmt::format("--weight-decay must be >= 0, got {}", c.weight_decay));
  if (!(c.grad_clip >= 0)) bad(fmt::format("--grad-clip must be >= 0 (0: no clipping), got {}", c.grad_clip));
  c.on_nonfinite = parse_choice<OnNonfinite>("--on-nonfinite", text.on_nonfinite);
  c.mixed_precision = parse_choice<MixedPrecision>("--mixed-precision", text.mixed_precision);
  c.device = parse_choice<ComputeDevice>("--device", text.device);
  if (!(c.peak_tflops > 0)) bad(fmt::format("--peak-tflops must be positive, got {}", c.peak_tflops));
}

// Evaluation, reporting and the sample at the end.
void validate_reporting(TrainConfig& c, const ChoiceText& text) {
  if (c.eval_every < 0) bad(fmt::format("--eval-every must be >= 0 (0: only at the end), got {}", c.eval_every));
  if (c.eval_batches <= 0) bad(fmt::format("--eval-batches must be positive, got {}", c.eval_batches));
  if (c.log_every <= 0) bad(fmt::format("--log-every must be positive, got {}", c.log_every));
  c.progress_bar = parse_choice<ProgressBar>("--progress-bar", text.progress_bar);
  if (c.out_dir.empty()) bad("--out must name a directory");
  if (c.sample_tokens < 0) bad(fmt::format("--sample-tokens must be >= 0, got {}", c.sample_tokens));
  if (c.top_k < 0) bad(fmt::format("--top-k must be >= 0 (0: greedy), got {}", c.top_k));
  if (!(c.temperature > 0)) bad(fmt::format("--temperature must be positive, got {}", c.temperature));
}

// Checks every value and parses the fixed-choice flags, in the order the flags are
// listed, so the first bad one is the one reported.
void validate(TrainConfig& c, const ChoiceText& text, int world_size) {
  c.activation_checkpointing = parse_switch("--activation-checkpointing", text.activation_checkpointing);
  c.reshard_after_forward = parse_switch("--reshard-after-forward", text.reshard_after_forward);
  c.final_checkpoint = !text.no_final_checkpoint;
  validate_batch(c, world_size);
  validate_paths(c, text);
  validate_training(c, text);
  validate_reporting(c, text);
}

void add_model_and_data_flags(CLI::App& app, TrainConfig& c, ChoiceText& text) {
  CLI::Option* model =
      app.add_option("--model", text.model, "tiny | small | gpt2-124m | llama-7b | path to a JSON model config");
  app.add_option("--init-from", c.init_from,
                 "a Hugging Face GPT-2 or Llama directory (config.json + safetensors, as save_pretrained writes "
                 "them): fine-tune it; the model is its config")
      ->excludes(model);
  app.add_option("--export-hf", c.export_hf,
                 "at the end, write the model as a Hugging Face directory (config.json + model.safetensors) that "
                 "transformers' from_pretrained loads");
  app.add_option("--data", c.data, "token file: any text file (bytes) or an llm.c .bin shard; default: embedded corpus");
  app.add_option("--data-format", text.data_format, "auto (.bin = llm.c shard, else bytes) | bytes | llmc");
  app.add_option("--val-fraction", c.val_fraction, "last fraction of the tokens held out for validation");
}

void add_training_flags(CLI::App& app, TrainConfig& c, ChoiceText& text) {
  app.add_option("--steps", c.steps, "optimizer steps");
  app.add_option("--global-batch", c.global_batch, "sequences per optimizer step over all ranks");
  app.add_option("--micro-batch", c.micro_batch,
                 "sequences per forward on one rank (0: global/ranks); accumulation = global/(ranks*micro)");
  app.add_option("--seq-len", c.seq_len, "tokens per sequence (0: the model's default)");
  app.add_option("--lr", c.lr, "peak learning rate");
  app.add_option("--min-lr", c.min_lr, "final learning rate of the cosine schedule (<0: lr/10)");
  app.add_option("--warmup", c.warmup, "linear warmup steps (<0: 5% of --steps)");
  app.add_option("--schedule", text.schedule, "cosine | constant (after warmup)");
  app.add_option("--weight-decay", c.weight_decay, "AdamW decoupled weight decay, on matrices (linear and embedding weights); biases and norm weights get none");
  app.add_option("--grad-clip", c.grad_clip, "clip the global gradient norm to this (0: off)");
  app.add_option("--on-nonfinite", text.on_nonfinite,
                 "stop | skip: a step whose loss or gradient norm is NaN or infinite ends the run (exit 1, the "
                 "parameters as after the previous step) or is dropped");
  app.add_option("--seed", c.seed, "seed for initialisation, data order and sampling");
  app.add_option("--mixed-precision", text.mixed_precision, "none | bf16 (bf16 compute, f32 master weights and reduce)");
  app.add_option("--device", text.device,
                 "cpu | cuda (each rank on the GPU of its local rank; NCCL when every rank has its own GPU)");
  app.add_option("--peak-tflops", c.peak_tflops, "the GPU's peak TFLOP/s, for the MFU shown with --device cuda");
  app.add_option("--activation-checkpointing", text.activation_checkpointing,
                 "on | off: recompute each block's forward in backward");
  app.add_option("--reshard-after-forward", text.reshard_after_forward,
                 "true | false: free gathered block parameters after forward");
  app.add_flag("--hsdp", c.hsdp,
               "HSDP over the hosts: shard within each host, replicate across hosts (a (hosts, ranks per host) "
               "mesh; the hosts must hold equal blocks of consecutive ranks); default: shard over all ranks");
}

void add_output_flags(CLI::App& app, TrainConfig& c, ChoiceText& text) {
  app.add_option("--eval-every", c.eval_every, "validation loss every N steps (0: only at the end)");
  app.add_option("--eval-batches", c.eval_batches, "micro-batches per rank in each evaluation");
  app.add_option("--log-every", c.log_every, "progress line every N steps");
  app.add_option("--progress-bar", text.progress_bar,
                 "auto | on | off: redraw a bar between progress lines (auto: stdout is a terminal; "
                 "mpirun gives ranks a pseudo-terminal, so use off when logging to a file)");
  app.add_option("--out", c.out_dir, "output directory (metrics.jsonl, loss.svg, config.json)");
  app.add_option("--ckpt-every", c.ckpt_every,
                 "save a distributed checkpoint every N steps (0: none) in <out>/checkpoints/step_<N>");
  app.add_option("--resume", c.resume, "continue from a checkpoint directory written by dtr-train");
  app.add_flag("--overwrite", c.overwrite,
               "start afresh in an --out that holds checkpoints of an earlier run, removing them (without it such "
               "a run is refused; continue one with --resume)");
  app.add_flag("--allow-config-change", c.allow_config_change,
               "with --resume: continue although the global batch, sequence length, seed, data or mixed precision "
               "differ from the checkpoint's run (the model must be the same)");
  app.add_flag("--save-nonfinite", c.save_nonfinite,
               "save checkpoints even when parameters hold NaN or infinite values (without it such a save ends the "
               "run with exit 1 and keeps the last good checkpoint)");
  app.add_flag("--no-final-checkpoint", text.no_final_checkpoint,
               "do not save <out>/checkpoints/step_<steps> at the end (a stop by signal still saves)");
  app.add_option("--sample-tokens", c.sample_tokens, "tokens to generate at the end (0: none)");
  app.add_option("--top-k", c.top_k, "sample from the k most likely tokens (0: greedy)");
  app.add_option("--temperature", c.temperature, "softmax temperature for --top-k sampling");
  app.add_option("--prompt", c.prompt, "text the sample starts from (byte-level data only)");
  app.add_option("--profile", c.profile,
                 "record a step profile: Chrome trace JSON per rank (PATH with the rank inserted: trace.json -> "
                 "trace.rank0.json; opens in ui.perfetto.dev) and a top-spans table at the end (env: DTR_PROFILE)");
  app.add_flag("--estimate-only", c.estimate_only,
               "print the per-rank memory estimate of this configuration (every sharding strategy, with and "
               "without activation checkpointing) and exit; builds the model on the meta device only");
  app.add_option("--world-size", c.plan_world_size,
                 "with --estimate-only: the number of ranks to plan for (default: the ranks of this job)");
}

}  // namespace

CliResult parse_cli(int argc, const char* const* argv, int world_size) {
  TrainConfig c;
  ChoiceText text(c);
  CLI::App app{
      "dtr-train: trains a decoder-only transformer with fully_shard (FSDP) on every rank of an mpirun job.\n"
      "  mpirun -np 2 dtr-train                      # tiny model on the embedded corpus\n"
      "  mpirun -np 4 dtr-train --model small --data input.txt --steps 2000\n"
      "Writes metrics.jsonl, loss.svg, config.json and a final checkpoint to --out (and more with --ckpt-every).\n"
      "Ctrl-C / SIGTERM / SIGUSR1 save a checkpoint at the next step boundary and exit 0 (see --resume).",
      "dtr-train"};
  app.option_defaults()->always_capture_default();
  add_model_and_data_flags(app, c, text);
  add_training_flags(app, c, text);
  add_output_flags(app, c, text);
  CliResult result;
  try {
    app.parse(argc, argv);
    validate(c, text, world_size);
  } catch (const CLI::CallForHelp&) {
    result.exit_code = 0;
    result.message = app.help();
    return result;
  } catch (const CLI::ParseError& e) {
    result.exit_code = 2;
    result.message = fmt::format("dtr-train: {} (see --help)", e.what());
    return result;
  } catch (const BadFlag& e) {
    result.exit_code = 2;
    result.message = fmt::format("dtr-train: {}", e.what());
    return result;
  }
  result.config = std::move(c);
  return result;
}

}  // namespace dtr::train
