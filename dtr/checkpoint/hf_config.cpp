#include "dtr/checkpoint/hf_config.h"

#include "dtr/base/error.h"

#include <fstream>

namespace dtr::checkpoint {

namespace {

using nlohmann::json;

// A key's value, or `fallback` when absent or null (transformers' default).
template <class T>
T value_or(const json& config, const std::string& key, T fallback) {
  auto it = config.find(key);
  return it == config.end() || it->is_null() ? fallback : it->get<T>();
}

template <class T>
T required(const json& config, const std::string& key, const std::string& context) {
  auto it = config.find(key);
  DTR_CHECK(it != config.end() && !it->is_null(), "{}: the config has no '{}'", context, key);
  return it->get<T>();
}

// Refuses a setting dtr's model does not compute: `key` present with a value other
// than `supported`.
template <class T>
void refuse_unless(const json& config, const std::string& key, const T& supported, const std::string& context,
                   const std::string& why) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return;
  DTR_CHECK(it->get<T>() == supported, "{}: '{}' = {} is not supported ({})", context, key, it->dump(), why);
}

nn::TransformerConfig gpt2_config(const json& c, const std::string& context) {
  nn::TransformerConfig out;
  out.style = nn::TransformerStyle::gpt2;
  out.vocab_size = required<int64_t>(c, "vocab_size", context);
  out.dim = required<int64_t>(c, "n_embd", context);
  out.n_layers = required<int64_t>(c, "n_layer", context);
  out.n_heads = required<int64_t>(c, "n_head", context);
  out.max_seq_len = required<int64_t>(c, "n_positions", context);
  out.ffn_hidden = value_or<int64_t>(c, "n_inner", 0);
  out.norm_eps = value_or<double>(c, "layer_norm_epsilon", 1e-5);
  out.tie_weights = value_or<bool>(c, "tie_word_embeddings", true);
  const std::string act = value_or<std::string>(c, "activation_function", "gelu_new");
  DTR_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh",
            "{}: 'activation_function' = \"{}\" is not supported (dtr's GPT-2 uses the tanh GELU, gelu_new)",
            context, act);
  refuse_unless(c, "scale_attn_weights", true, context, "dtr always scales attention by 1/sqrt(head dim)");
  refuse_unless(c, "scale_attn_by_inverse_layer_idx", false, context, "dtr does not scale attention by layer");
  refuse_unless(c, "add_cross_attention", false, context, "dtr's GPT-2 is decoder-only");
  return out;
}

nn::TransformerConfig llama_config(const json& c, const std::string& context) {
  nn::TransformerConfig out;
  out.style = nn::TransformerStyle::llama;
  out.vocab_size = required<int64_t>(c, "vocab_size", context);
  out.dim = required<int64_t>(c, "hidden_size", context);
  out.n_layers = required<int64_t>(c, "num_hidden_layers", context);
  out.n_heads = required<int64_t>(c, "num_attention_heads", context);
  out.n_kv_heads = value_or<int64_t>(c, "num_key_value_heads", out.n_heads);
  out.ffn_hidden = required<int64_t>(c, "intermediate_size", context);
  out.max_seq_len = value_or<int64_t>(c, "max_position_embeddings", 2048);
  out.norm_eps = value_or<double>(c, "rms_norm_eps", 1e-6);
  // transformers 5 keeps RoPE's settings in rope_parameters; earlier versions in
  // rope_theta and rope_scaling.
  out.rope_theta = value_or<double>(c, "rope_theta", 10000.0);
  if (auto rope = c.find("rope_parameters"); rope != c.end() && rope->is_object()) {
    out.rope_theta = value_or<double>(*rope, "rope_theta", out.rope_theta);
    const std::string type = value_or<std::string>(*rope, "rope_type", "default");
    DTR_CHECK(type == "default",
              "{}: 'rope_parameters' with rope_type \"{}\" is not supported (dtr implements plain RoPE only)",
              context, type);
  }
  out.tie_weights = value_or<bool>(c, "tie_word_embeddings", false);
  const std::string act = value_or<std::string>(c, "hidden_act", "silu");
  DTR_CHECK(act == "silu", "{}: 'hidden_act' = \"{}\" is not supported (dtr's Llama uses SwiGLU, silu)", context,
            act);
  refuse_unless(c, "attention_bias", false, context, "dtr's Llama projections have no bias");
  refuse_unless(c, "mlp_bias", false, context, "dtr's Llama projections have no bias");
  refuse_unless(c, "rope_scaling", json(), context, "dtr implements plain RoPE only");
  DTR_CHECK(out.n_heads > 0 && out.dim % out.n_heads == 0, "{}: hidden_size {} is not a multiple of {} heads",
            context, out.dim, out.n_heads);
  refuse_unless(c, "head_dim", out.dim / out.n_heads, context, "dtr's head dim is hidden_size / num_attention_heads");
  return out;
}

std::string torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    case DType::f64: return "float64";
    default: return "float32";
  }
}

}  // namespace

nn::TransformerConfig transformer_config_from_hf(const json& config, const std::string& context) {
  const std::string type = value_or<std::string>(config, "model_type", "");
  if (type == "gpt2") return gpt2_config(config, context);
  if (type == "llama") return llama_config(config, context);
  DTR_FAIL("{}: model_type \"{}\" is not supported; dtr reads \"gpt2\" (GPT2LMHeadModel) and \"llama\" "
           "(LlamaForCausalLM)",
           context, type);
}

nn::TransformerConfig read_hf_config(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "config.json";
  std::ifstream in(path);
  DTR_CHECK(in.good(), "read_hf_config: cannot open {} (a Hugging Face model directory has one)", path.string());
  json config;
  try {
    config = json::parse(in);
  } catch (const json::exception& e) {
    DTR_FAIL("read_hf_config: {} is not valid JSON: {}", path.string(), e.what());
  }
  try {
    return transformer_config_from_hf(config, path.string());
  } catch (const json::exception& e) {
    DTR_FAIL("read_hf_config: {}: a key has the wrong type: {}", path.string(), e.what());
  }
}

json hf_config_of(const nn::TransformerConfig& c) {
  if (c.style == nn::TransformerStyle::gpt2) {
    return {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"vocab_size", c.vocab_size},
            {"n_embd", c.dim},
            {"n_layer", c.n_layers},
            {"n_head", c.n_heads},
            {"n_positions", c.max_seq_len},
            {"n_inner", c.hidden()},
            {"layer_norm_epsilon", c.norm_eps},
            {"activation_function", "gelu_new"},
            {"tie_word_embeddings", c.tie_weights},
            {"resid_pdrop", c.dropout},
            {"embd_pdrop", c.dropout},
            {"attn_pdrop", 0.0},
            {"torch_dtype", torch_dtype_name(c.dtype)},
            {"dtype", torch_dtype_name(c.dtype)}};
  }
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"vocab_size", c.vocab_size},
          {"hidden_size", c.dim},
          {"num_hidden_layers", c.n_layers},
          {"num_attention_heads", c.n_heads},
          {"num_key_value_heads", c.kv_heads()},
          {"intermediate_size", c.hidden()},
          {"max_position_embeddings", c.max_seq_len},
          {"rms_norm_eps", c.norm_eps},
          {"rope_theta", c.rope_theta},
          {"rope_parameters", {{"rope_theta", c.rope_theta}, {"rope_type", "default"}}},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"tie_word_embeddings", c.tie_weights},
          {"torch_dtype", torch_dtype_name(c.dtype)},
          {"dtype", torch_dtype_name(c.dtype)}};
}

}  // namespace dtr::checkpoint
