#include "config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>
#include <vector>

namespace dtr::train {

namespace {

// A model file's fields, each checked for the JSON type and range it needs: a
// value outside them is an error naming the field, never silently changed.
class ModelFile {
 public:
  ModelFile(const nlohmann::json& j, const std::string& path) : j_(j), path_(path) {}

  // An integer >= min (`note` says what the smallest value means, if anything).
  int64_t integer(const char* key, int64_t fallback, int64_t min, const char* note = "") const {
    if (!j_.contains(key)) return fallback;
    const nlohmann::json& v = j_.at(key);
    const bool fits = v.is_number_integer() &&
                      !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()});
    if (!fits || v.get<int64_t>() < min) fail(key, fmt::format("an integer >= {}{}", min, note), v);
    return v.get<int64_t>();
  }
  // A number in [min, max) or, with min_open, in (min, max).
  double real(const char* key, double fallback, double min, bool min_open, double max) const {
    if (!j_.contains(key)) return fallback;
    const nlohmann::json& v = j_.at(key);
    const double x = v.is_number() ? v.get<double>() : 0;
    if (!v.is_number() || !std::isfinite(x) || (min_open ? x <= min : x < min) || x >= max) {
      fail(key, std::isfinite(max) ? fmt::format("a number in {}{}, {})", min_open ? "(" : "[", min, max)
                                   : fmt::format("a number > {}", min),
           v);
    }
    return x;
  }
  bool boolean(const char* key, bool fallback) const {
    if (!j_.contains(key)) return fallback;
    if (!j_.at(key).is_boolean()) fail(key, "true or false", j_.at(key));
    return j_.at(key).get<bool>();
  }

 private:
  [[noreturn]] void fail(const char* key, const std::string& expected, const nlohmann::json& got) const {
    throw std::invalid_argument(fmt::format("model file {}: '{}' must be {}, got {}", path_, key, expected, got.dump()));
  }
  const nlohmann::json& j_;
  const std::string& path_;
};

}  // namespace

ModelChoice parse_model(std::string_view text) {
  if (const std::optional<ModelPreset> preset = parse_enum<ModelPreset>(text)) return {.preset = preset};
  return {.preset = std::nullopt, .file = std::string(text)};
}

std::string to_string(const ModelChoice& model) { return model.preset ? to_string(*model.preset) : model.file; }

namespace {

nn::TransformerConfig preset_config(ModelPreset preset, int64_t dataset_vocab) {
  nn::TransformerConfig c;
  c.style = nn::TransformerStyle::llama;
  c.vocab_size = dataset_vocab;
  switch (preset) {
    case ModelPreset::tiny:
      c.dim = 128;
      c.n_layers = 2;
      c.n_heads = 4;
      c.max_seq_len = 64;
      break;
    case ModelPreset::small:
      c.dim = 256;
      c.n_layers = 4;
      c.n_heads = 8;
      c.max_seq_len = 256;
      break;
    case ModelPreset::gpt2_124m: {
      const nn::TransformerConfig g = nn::TransformerConfig::gpt2_124m();
      c.dim = g.dim;
      c.n_layers = g.n_layers;
      c.n_heads = g.n_heads;
      c.max_seq_len = g.max_seq_len;
      c.ffn_hidden = 4 * g.dim;
      c.vocab_size = std::max(dataset_vocab, g.vocab_size);
      break;
    }
    case ModelPreset::llama_7b:
      c.dim = 4096;
      c.n_layers = 32;
      c.n_heads = 32;
      c.ffn_hidden = 11008;
      c.max_seq_len = 4096;
      c.vocab_size = std::max<int64_t>(dataset_vocab, 32000);
      break;
  }
  return c;
}

// The JSON object of a model file, with only known keys.
nlohmann::json read_model_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw std::invalid_argument(fmt::format("unknown model '{}' (expected {} or a JSON config file)", path,
                                            fmt::join(EnumNames<ModelPreset>::names, ", ")));
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(fmt::format("model file {}: not valid JSON: {}", path, e.what()));
  }
  if (!j.is_object()) throw std::invalid_argument(fmt::format("model file {}: expected a JSON object", path));
  static const std::set<std::string> known = {"style",       "dim",         "n_layers",   "n_heads",
                                              "n_kv_heads",  "ffn_hidden",  "max_seq_len", "vocab_size",
                                              "tie_weights", "dropout",     "norm_eps",   "rope_theta"};
  for (const auto& [key, value] : j.items()) {
    if (!known.contains(key)) throw std::invalid_argument(fmt::format("model file {}: unknown key '{}'", path, key));
  }
  return j;
}

nn::TransformerConfig file_config(const std::string& path, int64_t dataset_vocab) {
  const nlohmann::json j = read_model_file(path);
  nn::TransformerConfig c;
  c.style = nn::TransformerStyle::llama;
  if (j.contains("style")) {
    const nlohmann::json& s = j["style"];
    const std::optional<nn::TransformerStyle> style =
        s.is_string() ? parse_enum<nn::TransformerStyle>(s.get<std::string>()) : std::nullopt;
    if (!style) {
      throw std::invalid_argument(
          fmt::format("model file {}: 'style' must be \"llama\" or \"gpt2\", got {}", path, s.dump()));
    }
    c.style = *style;
  }
  const ModelFile f(j, path);
  const double inf = std::numeric_limits<double>::infinity();
  c.dim = f.integer("dim", 256, 1);
  c.n_layers = f.integer("n_layers", 4, 1);
  c.n_heads = f.integer("n_heads", 8, 1);
  c.n_kv_heads = f.integer("n_kv_heads", 0, 0, " (0: as many as n_heads)");
  c.ffn_hidden = f.integer("ffn_hidden", 0, 0, " (0: the style's default)");
  c.max_seq_len = f.integer("max_seq_len", 256, 1);
  c.vocab_size = f.integer("vocab_size", dataset_vocab, 1);
  c.tie_weights = f.boolean("tie_weights", false);
  c.dropout = f.real("dropout", 0.0, 0.0, false, 1.0);
  c.norm_eps = f.real("norm_eps", 1e-5, 0.0, true, inf);
  c.rope_theta = f.real("rope_theta", 10000.0, 0.0, true, inf);
  if (c.vocab_size < dataset_vocab) {
    throw std::invalid_argument(fmt::format("model file {}: vocab_size {} is smaller than the data's vocabulary {}",
                                            path, c.vocab_size, dataset_vocab));
  }
  if (c.dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.dim % c.n_heads != 0 || c.max_seq_len <= 0 ||
      c.n_kv_heads < 0 || (c.n_kv_heads > 0 && c.n_heads % c.n_kv_heads != 0)) {
    throw std::invalid_argument(fmt::format(
        "model file {}: need positive dim, n_layers, n_heads, max_seq_len, dim divisible by n_heads and "
        "n_heads by n_kv_heads (dim {}, n_layers {}, n_heads {}, n_kv_heads {}, max_seq_len {})",
        path, c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.max_seq_len));
  }
  return c;
}

}  // namespace

nn::TransformerConfig model_config(const ModelChoice& model, int64_t dataset_vocab) {
  return model.preset ? preset_config(*model.preset, dataset_vocab) : file_config(model.file, dataset_vocab);
}

nn::TransformerConfig model_config(const std::string& model, int64_t dataset_vocab) {
  return model_config(parse_model(model), dataset_vocab);
}


nlohmann::json to_json(const nn::TransformerConfig& m) {
  return {{"style", to_string(m.style)},
          {"vocab_size", m.vocab_size},
          {"dim", m.dim},
          {"n_layers", m.n_layers},
          {"n_heads", m.n_heads},
          {"n_kv_heads", m.kv_heads()},
          {"ffn_hidden", m.hidden()},
          {"max_seq_len", m.max_seq_len},
          {"tie_weights", m.tie_weights},
          {"dropout", m.dropout},
          {"norm_eps", m.norm_eps},
          {"rope_theta", m.rope_theta}};
}

nn::tensor_parallel::TransformerPlanOptions tensor_parallel_plan(const TrainConfig& c,
                                                                 std::optional<DType> reduce_dtype) {
  return {.vocab_parallel_embedding = c.loss_parallel || c.sequence_parallel,
          .loss_parallel = c.loss_parallel,
          .sequence_parallel = c.sequence_parallel,
          .reduce_dtype = reduce_dtype};
}

std::string tensor_parallel_text(const TrainConfig& c) {
  std::vector<std::string> options;
  if (c.sequence_parallel) options.emplace_back("sequence parallel");
  if (c.loss_parallel) options.emplace_back("loss parallel");
  if (options.empty()) return fmt::format("tensor parallel {}", c.tp);
  return fmt::format("tensor parallel {} ({})", c.tp, fmt::join(options, ", "));
}

void check_tensor_parallel(const TrainConfig& c, const nn::TransformerConfig& model, int64_t seq_len) {
  if (model.n_heads % c.tp != 0 || model.kv_heads() % c.tp != 0) {
    throw std::invalid_argument(fmt::format(
        "--tp {}: each tensor-parallel rank computes whole attention heads, and the model's {} heads ({} key/value "
        "heads) do not divide by {}",
        c.tp, model.n_heads, model.kv_heads(), c.tp));
  }
  if (!c.sequence_parallel) return;
  if (model.style != nn::TransformerStyle::llama || model.tie_weights) {
    throw std::invalid_argument(fmt::format(
        "--sequence-parallel needs a Llama-style model with its own output head (no learned positions, no head "
        "tied to the embedding); this model is {}{}",
        to_string(model.style), model.tie_weights ? " with a tied head" : ""));
  }
  if (seq_len % c.tp != 0) {
    throw std::invalid_argument(fmt::format(
        "--sequence-parallel: each of the --tp {} ranks takes an equal share of the sequence, and --seq-len {} "
        "does not divide by {}",
        c.tp, seq_len, c.tp));
  }
}

nlohmann::json to_json(const TrainConfig& c) {
  return {{"model", c.init_from.empty() ? to_string(c.model) : "(from --init-from)"},
          {"init_from", c.init_from},
          {"export_hf", c.export_hf},
          {"data", c.data.empty() ? std::string("(embedded corpus: data/corpus.txt)") : c.data},
          {"data_format", to_string(c.data_format)},
          {"val_fraction", c.val_fraction},
          {"steps", c.steps},
          {"global_batch", c.global_batch},
          {"micro_batch", c.micro_batch},
          {"grad_accum", c.grad_accum},
          {"world_size", c.world_size},
          {"seq_len", c.seq_len},
          {"lr", c.lr},
          {"min_lr", c.min_lr},
          {"warmup", c.warmup},
          {"schedule", to_string(c.schedule)},
          {"weight_decay", c.weight_decay},
          {"grad_clip", c.grad_clip},
          {"on_nonfinite", to_string(c.on_nonfinite)},
          {"seed", c.seed},
          {"mixed_precision", to_string(c.mixed_precision)},
          {"device", to_string(c.device)},
          {"activation_checkpointing", c.activation_checkpointing},
          {"reshard_after_forward", c.reshard_after_forward},
          {"reshard_to_host", c.reshard_to_host},
          {"quantize_weights", c.quantize_weights},
          {"quantize_grads", c.quantize_grads},
          {"hsdp", c.hsdp},
          {"tp", c.tp},
          {"sequence_parallel", c.sequence_parallel},
          {"loss_parallel", c.loss_parallel},
          {"eval_every", c.eval_every},
          {"eval_batches", c.eval_batches},
          {"log_every", c.log_every},
          {"log_samples", c.log_samples},
          {"progress_bar", to_string(c.progress_bar)},
          {"out_dir", c.out_dir},
          {"ckpt_every", c.ckpt_every},
          {"async_checkpoint", c.async_checkpoint},
          {"keep_last", c.keep_last},
          {"resume", c.resume},
          {"allow_config_change", c.allow_config_change},
          {"final_checkpoint", c.final_checkpoint},
          {"overwrite", c.overwrite},
          {"sample_tokens", c.sample_tokens},
          {"top_k", c.top_k},
          {"temperature", c.temperature},
          {"prompt", c.prompt},
          {"profile", c.profile}};
}

}  // namespace dtr::train
