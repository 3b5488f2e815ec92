#include "dtr/checkpoint/hf_weights.h"

#include "dtr/base/error.h"
#include "dtr/checkpoint/agreement.h"
#include "dtr/checkpoint/file_io.h"
#include "dtr/checkpoint/hf_config.h"
#include "dtr/checkpoint/hf_layout.h"
#include "dtr/checkpoint/model_tensors.h"
#include "dtr/checkpoint/safetensors.h"
#include "dtr/mesh/distributed.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/ops/shape_ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

namespace dtr::checkpoint {

namespace fs = std::filesystem;

namespace {

// The checkpoint's tensors: which file holds each, and the files' headers.
struct HfFiles {
  std::map<std::string, fs::path> file_of;
  std::map<fs::path, SafetensorsHeader> headers;

  const SafetensorsTensor& entry(const std::string& name) const {
    return headers.at(file_of.at(name)).tensors.at(name);
  }
};

// The index's tensor -> file map; empty when `dir` has no index.
std::map<std::string, fs::path> read_index(const fs::path& dir) {
  const fs::path index = dir / "model.safetensors.index.json";
  std::map<std::string, fs::path> file_of;
  if (!fs::exists(index)) return file_of;
  std::ifstream in(index);
  try {
    const auto json = nlohmann::json::parse(in);
    for (const auto& [name, file] : json.at("weight_map").items()) file_of[name] = dir / file.get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    DTR_FAIL("{}: not a safetensors index (a JSON object with a weight_map): {}", index.string(), e.what());
  }
  return file_of;
}

// model.safetensors when there is one (transformers reads it first too), else the
// sharded files of the index.
HfFiles open_hf_files(const fs::path& dir) {
  HfFiles files;
  const fs::path single = dir / "model.safetensors";
  if (fs::exists(single)) {
    for (const auto& [name, entry] : read_safetensors_header(single).tensors) files.file_of[name] = single;
  } else {
    files.file_of = read_index(dir);
    DTR_CHECK(!files.file_of.empty(),
              "{} has neither model.safetensors nor model.safetensors.index.json (dtr reads safetensors only: "
              "save the model with save_pretrained(..., safe_serialization=True))",
              dir.string());
  }
  for (const auto& [name, file] : files.file_of) {
    if (!files.headers.contains(file)) files.headers[file] = read_safetensors_header(file);
    DTR_CHECK(files.headers[file].tensors.contains(name), "{}: the index says it holds '{}', but it does not",
              file.string(), name);
  }
  return files;
}

// Tensors of a transformers checkpoint that are not weights (buffers older
// versions saved), and a tied head's copy of the embedding.
bool ignorable(const std::string& name, const nn::TransformerConfig& config) {
  auto ends_with = [&](std::string_view suffix) { return name.ends_with(suffix); };
  return ends_with(".attn.bias") || ends_with(".attn.masked_bias") || ends_with("rotary_emb.inv_freq") ||
         (config.tie_weights && name == "lm_head.weight");
}

std::string describe(const nn::TransformerConfig& c) {
  return fmt::format("{} vocab {} dim {} layers {} heads {} kv_heads {} hidden {} max_seq_len {} norm_eps {} "
                     "rope_theta {} tied {}",
                     c.style == nn::TransformerStyle::gpt2 ? "gpt2" : "llama", c.vocab_size, c.dim, c.n_layers,
                     c.n_heads, c.kv_heads(), c.hidden(), c.max_seq_len, c.norm_eps, c.rope_theta, c.tie_weights);
}

void check_same_config(const nn::TransformerConfig& model, const nn::TransformerConfig& file, const fs::path& dir) {
  const bool same = model.style == file.style && model.vocab_size == file.vocab_size && model.dim == file.dim &&
                    model.n_layers == file.n_layers && model.n_heads == file.n_heads &&
                    model.kv_heads() == file.kv_heads() && model.hidden() == file.hidden() &&
                    model.norm_eps == file.norm_eps &&
                    // GPT-2's positions are weights; Llama's maximum length is only a check.
                    (model.style == nn::TransformerStyle::gpt2 ? model.max_seq_len == file.max_seq_len
                                                              : model.rope_theta == file.rope_theta) &&
                    model.tie_weights == file.tie_weights;
  DTR_CHECK(same, "load_hf_pretrained from {}: the model is {}, the directory's config.json {} (build the model "
            "from read_hf_config)",
            dir.string(), describe(model), describe(file));
}

}  // namespace

void load_hf_pretrained(nn::Transformer& model, const fs::path& dir) {
  distributed::ensure_initialized("dtr::checkpoint::load_hf_pretrained");
  autograd::NoGradGuard no_grad;
  const auto tensors = model_tensors(model);
  std::string error;
  std::vector<std::pair<Tensor, Tensor>> staged;  // slot, its local part
  try {
    const nn::TransformerConfig& config = model.config();
    check_same_config(config, read_hf_config(dir), dir);
    const HfFiles files = open_hf_files(dir);
    const bool prefixed = std::any_of(files.file_of.begin(), files.file_of.end(),
                                      [](const auto& f) { return f.first.starts_with("transformer."); });
    const auto sources = hf_sources(config, prefixed ? "transformer." : "");
    std::vector<std::string> missing, mismatched;
    std::set<std::string> used;
    for (const auto& t : tensors) {
      auto source = sources.find(t.name);
      DTR_CHECK(source != sources.end(), "load_hf_pretrained: the model's '{}' has no Hugging Face counterpart",
                t.name);
      const HfSource& s = source->second;
      used.insert(s.hf_name);
      if (!files.file_of.contains(s.hf_name)) {
        missing.push_back(s.hf_name);
      } else if (files.entry(s.hf_name).shape != s.hf_shape) {
        mismatched.push_back(fmt::format("'{}' is [{}], expected [{}] for the config", s.hf_name,
                                         fmt::join(files.entry(s.hf_name).shape, ", "), fmt::join(s.hf_shape, ", ")));
      }
    }
    std::vector<std::string> unexpected;
    for (const auto& [name, file] : files.file_of) {
      if (!used.contains(name) && !ignorable(name, config)) unexpected.push_back(name);
    }
    DTR_CHECK(missing.empty() && mismatched.empty() && unexpected.empty(),
              "load_hf_pretrained from {}: missing tensors [{}], tensors the model does not have [{}], wrong "
              "shapes [{}]",
              dir.string(), fmt::join(missing, ", "), fmt::join(unexpected, ", "), fmt::join(mismatched, "; "));
    for (const auto& t : tensors) {
      const HfSource& s = sources.at(t.name);
      const Box box = t.local_box();
      const Tensor read = read_safetensors_box(files.file_of.at(s.hf_name), files.headers.at(files.file_of.at(s.hf_name)),
                                               s.hf_name, hf_box_of(s, box));
      staged.emplace_back(t.local, dtr_part_from_hf(s, box, read).to(t.local.dtype()));
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_or_throw(fmt::format("load_hf_pretrained from {}", dir.string()), error);
  for (auto& [slot, local] : staged) slot.copy_(local.to(slot.device()));
}

void save_hf_pretrained(nn::Transformer& model, const fs::path& dir) {
  distributed::ensure_initialized("dtr::checkpoint::save_hf_pretrained");
  autograd::NoGradGuard no_grad;
  const bool writer_rank = distributed::rank() == 0;
  const auto tensors = model_tensors(model);
  const auto sources = hf_sources(model.config(), "transformer.");
  // The checkpoint's tensors in the model's order, each with the dtr tensors it is made of.
  std::vector<std::string> hf_names;
  std::map<std::string, std::vector<const ModelTensor*>> parts_of;
  for (const auto& t : tensors) {
    auto source = sources.find(t.name);
    DTR_CHECK(source != sources.end(), "save_hf_pretrained: the model's '{}' has no Hugging Face counterpart",
              t.name);
    if (!parts_of.contains(source->second.hf_name)) hf_names.push_back(source->second.hf_name);
    parts_of[source->second.hf_name].push_back(&t);
  }
  WriterSteps steps(writer_rank);
  std::unique_ptr<SafetensorsWriter> writer;
  const fs::path weights = dir / "model.safetensors", config = dir / "config.json";
  const fs::path weights_tmp = weights.string() + ".tmp", config_tmp = config.string() + ".tmp";
  steps.run([&] {
    fs::create_directories(dir);
    std::vector<SafetensorsWriter::Entry> entries;
    for (const auto& name : hf_names) {
      const ModelTensor& first = *parts_of[name].front();
      entries.push_back({name, first.local.dtype(), sources.at(first.name).hf_shape});
    }
    writer = std::make_unique<SafetensorsWriter>(weights_tmp, std::move(entries),
                                                 std::map<std::string, std::string>{{"format", "pt"}});
  });
  for (const auto& name : hf_names) {
    // Every rank takes part in each gather, even after rank 0 failed.
    std::vector<std::pair<const HfSource*, Tensor>> pieces;  // where each whole dtr tensor goes
    for (const ModelTensor* t : parts_of[name]) pieces.emplace_back(&sources.at(t->name), t->full());
    steps.run([&] {
      std::sort(pieces.begin(), pieces.end(),
                [](const auto& a, const auto& b) { return a.first->offset < b.first->offset; });
      std::vector<Tensor> converted;
      for (const auto& [source, full] : pieces) converted.push_back(hf_part_from_dtr(*source, full));
      const bool fused_columns = pieces.front().first->layout == HfSource::Layout::transposed;
      writer->write(name, converted.size() == 1 ? converted[0] : cat(converted, fused_columns ? 1 : 0));
    });
  }
  steps.run([&] {
    writer->finish();
    {
      std::ofstream out(config_tmp);
      out << hf_config_of(model.config()).dump(2) << "\n";
      DTR_CHECK(out.good(), "save_hf_pretrained: cannot write {}", config_tmp.string());
    }
    // Both files are complete before either replaces what was there. An earlier
    // sharded save's files would shadow nothing (model.safetensors is read first)
    // but mislead: they go.
    const auto stale = read_index(dir);
    fs::rename(weights_tmp, weights);
    fs::rename(config_tmp, config);
    for (const auto& [name, file] : stale) fs::remove(file);
    fs::remove(dir / "model.safetensors.index.json");
    fsync_directory(dir);
  });
  writer.reset();
  if (writer_rank && !steps.error().empty()) {
    std::error_code ignored;
    fs::remove(weights_tmp, ignored);
    fs::remove(config_tmp, ignored);
  }
  agree_or_throw(fmt::format("save_hf_pretrained to {}", dir.string()), steps.error());
}

}  // namespace dtr::checkpoint
