// TrainConfig: everything a dtr-train run is told (flags, resolved defaults), the
// enums of the flags with a fixed set of values, the named model shapes, and the
// JSON forms of the config and the model shape.
//
// Models: "tiny" (byte-level, trains in about a minute on 2 CPU ranks), "small",
// "gpt2-124m" (the GPT-2 124M shape, Llama style unless the file says gpt2),
// "llama-7b" (the Llama-2 7B shape: dim 4096, 32 layers, 32 heads, ffn 11008,
// vocab 32000, 4096 positions; for --estimate-only planning, far too large to
// train on a CPU), or a
// path to a JSON file with TransformerConfig fields:
//   {"style": "llama"|"gpt2", "dim": 256, "n_layers": 4, "n_heads": 8, "n_kv_heads": 0,
//    "ffn_hidden": 0, "max_seq_len": 256, "vocab_size": 256, "tie_weights": false,
//    "dropout": 0.0, "norm_eps": 1e-5, "rope_theta": 10000}
// (every key optional; unknown keys are an error). The vocabulary is the
// dataset's (256 for bytes, 50257 for llm.c shards) unless the file sets a larger one.
//
// The enums are parsed from their flags once, by parse_cli (cli.h); config.json
// and checkpoints record them by name (to_string, enum_names.h).
#pragma once

#include "dataset.h"
#include "enum_names.h"

#include "dtr/nn/tensor_parallel/transformer_plan.h"
#include "dtr/nn/transformer.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dtr::train {

// --model: the named shapes.
enum class ModelPreset { tiny, small, gpt2_124m, llama_7b };
template <>
struct EnumNames<ModelPreset> {
  static constexpr std::array<std::string_view, 4> names = {"tiny", "small", "gpt2-124m", "llama-7b"};
};

// --model as given: a named shape, or else the path of a JSON model file.
struct ModelChoice {
  std::optional<ModelPreset> preset = ModelPreset::tiny;
  std::string file;  // when there is no preset
};
// The shape named `text`, else `text` as a file path (not checked here).
ModelChoice parse_model(std::string_view text);
std::string to_string(const ModelChoice& model);  // the name or the path, as given

// --schedule: the learning rate after warmup.
enum class Schedule { cosine, constant };
template <>
struct EnumNames<Schedule> {
  static constexpr std::array<std::string_view, 2> names = {"cosine", "constant"};
};

// --on-nonfinite: what a step whose loss or gradient norm is not finite does.
enum class OnNonfinite { stop, skip };
template <>
struct EnumNames<OnNonfinite> {
  static constexpr std::array<std::string_view, 2> names = {"stop", "skip"};
};

// --mixed-precision: none (f32 throughout) or bf16 compute with f32 master weights and reduce.
enum class MixedPrecision { none, bf16 };
template <>
struct EnumNames<MixedPrecision> {
  static constexpr std::array<std::string_view, 2> names = {"none", "bf16"};
};

// --device: where each rank computes.
enum class ComputeDevice { cpu, cuda };
template <>
struct EnumNames<ComputeDevice> {
  static constexpr std::array<std::string_view, 2> names = {"cpu", "cuda"};
};

// --progress-bar: if_terminal ("auto") draws it when the output ends on a terminal
// (under mpirun: mpirun's stdout; terminal.h).
enum class ProgressBar { if_terminal, on, off };
template <>
struct EnumNames<ProgressBar> {
  static constexpr std::array<std::string_view, 3> names = {"auto", "on", "off"};
};

// The style names model files, config.json and the reports use (in the order of
// nn::TransformerStyle's values).
template <>
struct EnumNames<nn::TransformerStyle> {
  static constexpr std::array<std::string_view, 2> names = {"llama", "gpt2"};
};

struct TrainConfig {
  ModelChoice model;                // default: tiny
  std::string init_from;            // a Hugging Face GPT-2 / Llama directory: its config is the model, its weights the start
  std::string export_hf;            // non-empty: at the end, write the model here as a Hugging Face directory
  std::string data;                 // empty: the embedded corpus (data/corpus.txt)
  DataFormat data_format = DataFormat::by_extension;
  double val_fraction = 0.1;        // the last fraction of the tokens is the validation split
  int64_t steps = 300;
  int64_t global_batch = 16;        // sequences per optimizer step, over all ranks
  int64_t micro_batch = 0;          // sequences per forward on a rank; 0: global_batch / data-parallel ranks
  int64_t seq_len = 0;              // 0: the model's default
  double lr = 3e-3;
  double min_lr = -1;               // < 0: lr / 10
  int64_t warmup = -1;              // < 0: 5% of the steps
  Schedule schedule = Schedule::cosine;
  double weight_decay = 0.1;
  double grad_clip = 1.0;           // 0: no clipping (the norm is still reported)
  // A step whose loss or global gradient norm is not finite: stop (end the run
  // with exit code 1, parameters as after the previous step) or skip (drop its
  // update and count it).
  OnNonfinite on_nonfinite = OnNonfinite::stop;
  uint64_t seed = 1234;
  MixedPrecision mixed_precision = MixedPrecision::none;
  ComputeDevice device = ComputeDevice::cpu;  // cuda: each rank on the GPU of its local rank
  double peak_tflops = 989;         // for MFU on cuda: the GPU's dense bf16 peak (H100 SXM: 989)
  bool activation_checkpointing = false;
  bool reshard_after_forward = true;
  bool reshard_to_host = false;     // "host": blocks keep a host-local shard after forward (hpZ)
  bool quantize_weights = false;    // int8 all-gathers between hosts (qwZ)
  int64_t quantize_grads = 0;       // 8 or 4: gradients' partial sums between hosts quantized (qgZ); 0 off
  bool hsdp = false;                // shard within each host, replicate across hosts (mesh::init_hsdp_mesh)
  int64_t tp = 1;                   // tensor-parallel ranks, within a host; the others shard data and parameters
  bool sequence_parallel = false;   // --tp: activations between the blocks' projections split by sequence
  bool loss_parallel = false;       // --tp: embedding and head split by vocabulary, loss on the split logits
  int64_t eval_every = 50;          // 0: only at the end
  int64_t eval_batches = 4;         // micro-batches per rank per evaluation
  int64_t log_every = 10;
  bool log_samples = false;         // metrics.jsonl records each step's global sample indices, in rank order
  ProgressBar progress_bar = ProgressBar::if_terminal;
  std::string out_dir = "runs/latest";
  int64_t ckpt_every = 0;           // > 0: a checkpoint every N steps in <out>/checkpoints/step_<N>
  bool async_checkpoint = false;    // write --ckpt-every's checkpoints in the background while training goes on
  int64_t keep_last = 0;            // > 0: keep the N newest checkpoints; older ones go once a newer one is complete
  std::string resume;               // a checkpoint directory to continue from (its step, data position, RNG)
  bool allow_config_change = false; // resume although batch, sequence, seed, data or dtype policy changed
  bool save_nonfinite = false;      // save checkpoints even from NaN or infinite parameters (else refused)
  bool overwrite = false;           // a new run into an --out with checkpoints removes them (else refused)
  bool final_checkpoint = true;     // save <out>/checkpoints/step_<steps> at the end (--no-final-checkpoint: off)
  int64_t sample_tokens = 200;      // 0: no sample at the end
  int64_t top_k = 0;                // 0: greedy
  double temperature = 1.0;
  std::string prompt = "This License";
  std::string profile;              // non-empty: record a step profile, trace files <profile> with the rank inserted
  bool estimate_only = false;       // print the memory estimate for this config and exit (nothing allocated)
  int plan_world_size = 0;          // --world-size for --estimate-only (0: the job's ranks)

  // Filled in by the program:
  int world_size = 1;
  int64_t data_parallel = 1;  // world_size / tp: the ranks that take different data
  int64_t grad_accum = 1;
};

// The model shape for config.model (a named shape or a JSON file) and dataset vocabulary.
// Throws std::invalid_argument for a bad file.
nn::TransformerConfig model_config(const ModelChoice& model, int64_t dataset_vocab);
// The same for --model's text (a name, else a file; parse_model).
nn::TransformerConfig model_config(const std::string& model, int64_t dataset_vocab);

// --tp's plan for the model: the Megatron layout with --sequence-parallel and
// --loss-parallel (either splits the token embedding by vocabulary), gradient
// sums in `reduce_dtype`.
nn::tensor_parallel::TransformerPlanOptions tensor_parallel_plan(const TrainConfig& config,
                                                                 std::optional<DType> reduce_dtype = std::nullopt);
// "tensor parallel 2", or with its options "tensor parallel 2 (sequence parallel,
// loss parallel)", for the reports.
std::string tensor_parallel_text(const TrainConfig& config);
// Throws std::invalid_argument, naming the flags, when --tp (with its options)
// cannot split `model` over sequences of `seq_len` tokens: heads or key/value
// heads that do not divide by --tp, --sequence-parallel on a GPT-2-style or tied
// model or with a sequence length that does not divide.
void check_tensor_parallel(const TrainConfig& config, const nn::TransformerConfig& model, int64_t seq_len);

nlohmann::json to_json(const TrainConfig& config);
nlohmann::json to_json(const nn::TransformerConfig& model);

}  // namespace dtr::train
