// The config.json of a Hugging Face transformers model directory, for the two
// architectures nn::Transformer implements: GPT-2 (GPT2LMHeadModel) and Llama
// (LlamaForCausalLM). Reading maps the keys dtr uses onto a TransformerConfig and
// refuses, by key, any setting dtr does not implement (rather than loading a model
// that computes something else); writing gives a config.json that transformers'
// from_pretrained reads back as the same model.
//
//   nn::TransformerConfig config = checkpoint::read_hf_config("gpt2-small/");
#pragma once

#include "dtr/nn/transformer.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace dtr::checkpoint {

// `context` names the source in errors (a file path).
nn::TransformerConfig transformer_config_from_hf(const nlohmann::json& config, const std::string& context);
// <dir>/config.json.
nn::TransformerConfig read_hf_config(const std::filesystem::path& dir);
nlohmann::json hf_config_of(const nn::TransformerConfig& config);

}  // namespace dtr::checkpoint
