#include "cli.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <utility>

namespace dtr::train {

namespace {

struct BadFlag : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void bad(const std::string& message) { throw BadFlag(message); }

bool parse_switch(const std::string& flag, const std::string& value, const char* expected = "on/off or true/false") {
  if (value == "on" || value == "true" || value == "1" || value == "yes") return true;
  if (value == "off" || value == "false" || value == "0" || value == "no") return false;
  bad(fmt::format("{} must be {}, got '{}'", flag, expected, value));
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

// The values a number flag takes: from min to max, min itself excluded when
// above_min; by default its type's whole range. A floating-point flag takes
// finite values only.
template <typename T>
struct Bounds {
  T min = std::numeric_limits<T>::lowest();
  T max = std::numeric_limits<T>::max();
  bool above_min = false;
};

// "an integer from 1 to 9223372036854775807", "a finite number > 0", "a number in (0, 0.5]".
template <typename T>
std::string describe(const Bounds<T>& b) {
  if constexpr (std::is_integral_v<T>) {
    return fmt::format("an integer from {} to {}", b.min, b.max);
  } else {
    const bool has_min = b.min != std::numeric_limits<T>::lowest(), has_max = b.max != std::numeric_limits<T>::max();
    if (has_min && has_max) return fmt::format("a number in {}{}, {}]", b.above_min ? '(' : '[', b.min, b.max);
    if (has_min) return fmt::format("a finite number {} {}", b.above_min ? ">" : ">=", b.min);
    if (has_max) return fmt::format("a finite number <= {}", b.max);
    return "a finite number";
  }
}

// `text` as a T, or nullopt: decimal digits for an integer, a decimal number
// (or inf / nan) for a floating-point value, with an optional sign and nothing
// around them; nullopt too when it is outside T's range.
template <typename T>
std::optional<T> parse_number(std::string_view text) {
  if (text.size() > 1 && text[0] == '+' && text[1] != '-') text.remove_prefix(1);
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// The check of a number flag: a value that is not a T, is outside T's range or
// `bounds`, or is not finite throws BadFlag naming the flag and the value as typed
// (out of CLI11's parse, to parse_cli, which reports it like validate()'s).
// It then rewrites the value exactly (decimal for an integer, hexadecimal for a
// floating-point value), so that CLI11's own conversion stores the value checked:
// that conversion (strtoll in base 0, strtoull, strtold) saturates integers out of
// range, wraps a negative unsigned one, reads "010" as octal and takes "inf".
template <typename T>
CLI::Validator checked_number(const std::string& flag, Bounds<T> bounds) {
  return CLI::Validator(
      [flag, bounds](std::string& text) {
        const std::optional<T> value = parse_number<T>(text);
        bool ok = value && *value <= bounds.max && (bounds.above_min ? *value > bounds.min : *value >= bounds.min);
        if constexpr (std::is_floating_point_v<T>) ok = ok && std::isfinite(*value);
        if (!ok) bad(fmt::format("{} must be {}, got '{}'", flag, describe(bounds), text));
        if constexpr (std::is_integral_v<T>) {
          text = fmt::format("{}", *value);
        } else {
          text = fmt::format("{:a}", *value);
        }
        return std::string();
      },
      "");
}

// A number flag (integer or floating point) with its values checked and rewritten
// as above (a transform: CLI11's check() would keep the value as typed).
template <typename T>
void add_number(CLI::App& app, const std::string& flag, T& variable, const std::string& help, Bounds<T> bounds = {}) {
  app.add_option(flag, variable, help)->transform(checked_number(flag, bounds));
}

template <NamedEnum E>
E parse_choice(const char* flag, const std::string& value) {
  if (const std::optional<E> parsed = parse_enum<E>(value)) return *parsed;
  bad(fmt::format("{} must be {}, got '{}'", flag, names_list<E>(), value));
}

// The batch flags, and the world size and gradient accumulation they give. (Each
// number flag's own range is checked as it is parsed: add_number.)
void validate_batch(TrainConfig& c, int world_size) {
  if (c.plan_world_size > 0) {
    if (!c.estimate_only) {
      bad("--world-size plans a job for --estimate-only; a training job runs on the ranks mpirun starts");
    }
    world_size = c.plan_world_size;
  }
  for (const auto& [on, flag] : {std::pair{c.sequence_parallel, "--sequence-parallel"},
                                  std::pair{c.loss_parallel, "--loss-parallel"}}) {
    if (on && c.tp == 1) bad(fmt::format("{} splits the model over tensor-parallel ranks: it needs --tp 2 or more", flag));
  }
  if (world_size % c.tp != 0) {
    bad(fmt::format("--tp {} does not divide the {} ranks (each group of --tp consecutive ranks shares a model "
                    "replica)",
                    c.tp, world_size));
  }
  // The ranks that take different data: a tensor-parallel group shares its batch.
  const int64_t ranks = world_size / c.tp;
  const std::string ranks_text =
      c.tp == 1 ? fmt::format("{}", ranks) : fmt::format("{}: {} / --tp {}", ranks, world_size, c.tp);
  if (c.micro_batch == 0 && c.estimate_only) c.micro_batch = std::max<int64_t>(1, c.global_batch / ranks);
  if (c.micro_batch == 0) {
    if (c.global_batch % ranks != 0) {
      bad(fmt::format("--global-batch {} is not divisible by the number of {}ranks ({})", c.global_batch,
                      c.tp == 1 ? "" : "data-parallel ", ranks_text));
    }
    c.micro_batch = c.global_batch / ranks;
  }
  // ranks x micro-batch is at most the global batch (so it cannot overflow), or the
  // global batch cannot be divided by it.
  const bool fits = c.micro_batch <= c.global_batch / ranks;
  if (!c.estimate_only && (!fits || c.global_batch % (ranks * c.micro_batch) != 0)) {
    bad(fmt::format("--global-batch {} is not divisible by {}ranks ({}) x --micro-batch ({})", c.global_batch,
                    c.tp == 1 ? "" : "data-parallel ", ranks_text, c.micro_batch));
  }
  c.grad_accum = fits ? std::max<int64_t>(1, c.global_batch / (ranks * c.micro_batch)) : 1;
  c.world_size = world_size;
  c.data_parallel = ranks;
}

// The flags naming files and directories: checkpoints, models, data.
void validate_paths(TrainConfig& c, const ChoiceText& text) {
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
  if (c.min_lr < 0) c.min_lr = c.lr / 10;
  if (c.min_lr > c.lr) bad(fmt::format("--min-lr {} is above --lr {}", c.min_lr, c.lr));
  c.schedule = parse_choice<Schedule>("--schedule", text.schedule);
  if (c.warmup < 0) c.warmup = c.steps / 20;
  if (c.warmup >= c.steps) bad(fmt::format("--warmup {} must be below --steps {}", c.warmup, c.steps));
  c.on_nonfinite = parse_choice<OnNonfinite>("--on-nonfinite", text.on_nonfinite);
  c.mixed_precision = parse_choice<MixedPrecision>("--mixed-precision", text.mixed_precision);
  c.device = parse_choice<ComputeDevice>("--device", text.device);
}

// Evaluation, reporting and the sample at the end.
void validate_reporting(TrainConfig& c, const ChoiceText& text) {
  c.progress_bar = parse_choice<ProgressBar>("--progress-bar", text.progress_bar);
  if (c.out_dir.empty()) bad("--out must name a directory");
}

// Checks the values that depend on each other and parses the fixed-choice flags,
// in the order the flags are listed, so the first bad one is the one reported. (The
// number flags' own ranges were checked by the parser already, also in that order.)
void validate(TrainConfig& c, const ChoiceText& text, int world_size) {
  c.activation_checkpointing = parse_switch("--activation-checkpointing", text.activation_checkpointing);
  c.reshard_to_host = text.reshard_after_forward == "host";
  c.reshard_after_forward =
      c.reshard_to_host || parse_switch("--reshard-after-forward", text.reshard_after_forward, "true, false or host");
  if (c.reshard_to_host && c.estimate_only) {
    bad("--estimate-only does not model --reshard-after-forward host (each block keeps a host-local shard after "
        "forward); estimate with true, and add a 1/(ranks per host) part of each block's unsharded size");
  }
  if (c.quantize_grads != 0 && c.quantize_grads != 8 && c.quantize_grads != 4) {
    bad(fmt::format("--quantize-grads must be 8 or 4 (bits per value), got {}", c.quantize_grads));
  }
  if ((c.quantize_weights || c.quantize_grads != 0) && c.estimate_only) {
    bad("--estimate-only does not model --quantize-weights or --quantize-grads (their staging buffers between "
        "hosts); estimate without them");
  }
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
  add_number(app, "--val-fraction", c.val_fraction, "last fraction of the tokens held out for validation (at most 0.5)",
             {.min = 0, .max = 0.5, .above_min = true});
}

void add_training_flags(CLI::App& app, TrainConfig& c, ChoiceText& text) {
  add_number(app, "--steps", c.steps, "optimizer steps", {.min = 1});
  add_number(app, "--global-batch", c.global_batch, "sequences per optimizer step over all ranks", {.min = 1});
  add_number(app, "--micro-batch", c.micro_batch,
             "sequences per forward on one rank (0: global/ranks); accumulation = global/(ranks*micro)", {.min = 0});
  add_number(app, "--seq-len", c.seq_len, "tokens per sequence (0: the model's default)", {.min = 0});
  add_number(app, "--lr", c.lr, "peak learning rate", {.min = 0, .above_min = true});
  add_number(app, "--min-lr", c.min_lr, "final learning rate of the cosine schedule (<0: lr/10)");
  add_number(app, "--warmup", c.warmup, "linear warmup steps (<0: 5% of --steps)");
  app.add_option("--schedule", text.schedule, "cosine | constant (after warmup)");
  add_number(app, "--weight-decay", c.weight_decay,
             "AdamW decoupled weight decay, on matrices (linear and embedding weights); biases and norm weights get "
             "none",
             {.min = 0});
  add_number(app, "--grad-clip", c.grad_clip, "clip the global gradient norm to this (0: off)", {.min = 0});
  app.add_option("--on-nonfinite", text.on_nonfinite,
                 "stop | skip: a step whose loss or gradient norm is NaN or infinite ends the run (exit 1, the "
                 "parameters as after the previous step) or is dropped");
  add_number(app, "--seed", c.seed, "seed for initialisation, data order and sampling (0 to 2^64-1)");
  app.add_option("--mixed-precision", text.mixed_precision, "none | bf16 (bf16 compute, f32 master weights and reduce)");
  app.add_option("--device", text.device,
                 "cpu | cuda (each rank on the GPU of its local rank; NCCL when every rank has its own GPU)");
  add_number(app, "--peak-tflops", c.peak_tflops, "the GPU's peak TFLOP/s, for the MFU shown with --device cuda",
             {.min = 0, .above_min = true});
  app.add_option("--activation-checkpointing", text.activation_checkpointing,
                 "on | off: recompute each block's forward in backward");
  app.add_option("--reshard-after-forward", text.reshard_after_forward,
                 "true | false | host: free gathered block parameters after forward, keep them, or keep a "
                 "host-local shard (hpZ: backward all-gathers within each host)");
  app.add_flag("--quantize-weights", c.quantize_weights,
               "the all-gathers send int8 codes (one scale per 256 values) between hosts and stay exact within "
               "a host (ZeRO++'s qwZ); the shards are never quantized. No effect on one host");
  add_number(app, "--quantize-grads", c.quantize_grads,
             "8 | 4: gradients are reduce-scattered exactly within each host, and the hosts' partial sums cross "
             "as int8 or int4 codes, summed in f32 (ZeRO++'s qgZ); default 0: off. No effect on one host",
             {.min = 0, .max = 8});
  app.add_flag("--hsdp", c.hsdp,
               "HSDP over the hosts: shard within each host, replicate across hosts (a (hosts, ranks per host) "
               "mesh; the hosts must hold equal blocks of consecutive ranks); default: shard over all ranks");
  add_number(app, "--tp", c.tp,
             "tensor-parallel ranks: each group of N consecutive ranks (within a host) splits every block's "
             "attention heads and MLP (Megatron layout) and shares its batch, and FSDP (or --hsdp) shards over "
             "the groups; N divides the ranks, the heads and the key/value heads (default 1: FSDP only)",
             {.min = 1});
  app.add_flag("--sequence-parallel", c.sequence_parallel,
               "with --tp: the norms compute on each rank's share of the sequence, the activations between the "
               "blocks' projections are split by sequence (Megatron sequence parallelism; the token embedding is "
               "split by vocabulary); the sequence length divides by --tp; Llama-style models");
  app.add_flag("--loss-parallel", c.loss_parallel,
               "with --tp: the token embedding and output head split by vocabulary, and the loss computed on the "
               "split logits without gathering them");
}

void add_output_flags(CLI::App& app, TrainConfig& c, ChoiceText& text) {
  add_number(app, "--eval-every", c.eval_every, "validation loss every N steps (0: only at the end)", {.min = 0});
  add_number(app, "--eval-batches", c.eval_batches, "micro-batches per rank in each evaluation", {.min = 1});
  add_number(app, "--log-every", c.log_every, "progress line every N steps", {.min = 1});
  app.add_flag("--log-samples", c.log_samples,
               "record in metrics.jsonl the global indices of the samples each step trained on, every rank's in "
               "rank order (to check the data order, e.g. across a resume at another world size)");
  app.add_option("--progress-bar", text.progress_bar,
                 "auto | on | off: redraw a bar between progress lines (auto: when the output ends on a terminal, "
                 "under mpirun when mpirun's stdout is one and rank 0 runs on its host; output to a file or pipe "
                 "gets progress lines only)");
  app.add_option("--out", c.out_dir, "output directory (metrics.jsonl, loss.svg, config.json)");
  add_number(app, "--ckpt-every", c.ckpt_every,
             "save a distributed checkpoint every N steps (0: none) in <out>/checkpoints/step_<N>", {.min = 0});
  app.add_flag("--async-ckpt", c.async_checkpoint,
               "write the --ckpt-every checkpoints in the background: the step that saves copies the state and "
               "training goes on; a checkpoint counts once every rank's files are written (the stop and final "
               "checkpoints wait for the write)");
  add_number(app, "--keep-last", c.keep_last,
             "keep only the N newest checkpoints in <out>/checkpoints; an older one is removed once a newer one is "
             "complete (0: keep all)",
             {.min = 0});
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
  add_number(app, "--sample-tokens", c.sample_tokens, "tokens to generate at the end (0: none)", {.min = 0});
  add_number(app, "--top-k", c.top_k, "sample from the k most likely tokens (0: greedy)", {.min = 0});
  add_number(app, "--temperature", c.temperature, "softmax temperature for --top-k sampling",
             {.min = 0, .above_min = true});
  app.add_option("--prompt", c.prompt, "text the sample starts from (byte-level data only)");
  app.add_option("--profile", c.profile,
                 "record a step profile: Chrome trace JSON per rank (PATH with the rank inserted: trace.json -> "
                 "trace.rank0.json; opens in ui.perfetto.dev) and a top-spans table at the end (env: DTR_PROFILE)");
  app.add_flag("--estimate-only", c.estimate_only,
               "print the per-rank memory estimate of this configuration (every sharding strategy, with and "
               "without activation checkpointing) and exit; builds the model on the meta device only");
  add_number(app, "--world-size", c.plan_world_size,
             "with --estimate-only: the number of ranks to plan for (0, the default: the ranks of this job)",
             {.min = 0});
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
