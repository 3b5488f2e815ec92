#include "dtr/checkpoint/hf_layout.h"

#include "dtr/base/error.h"

#include <fmt/format.h>

namespace dtr::checkpoint {

namespace {

using Layout = HfSource::Layout;

HfSource same(std::string name, Shape shape) { return {std::move(name), Layout::same, 0, std::move(shape), 0}; }

void add_gpt2(std::map<std::string, HfSource>& out, const nn::TransformerConfig& c, const std::string& p) {
  const int64_t d = c.dim, h = c.hidden();
  out["tok_embeddings.weight"] = same(p + "wte.weight", {c.vocab_size, d});
  out["pos_embeddings.weight"] = same(p + "wpe.weight", {c.max_seq_len, d});
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string ours = fmt::format("layers.{}.", i), theirs = fmt::format("{}h.{}.", p, i);
    for (const char* part : {"weight", "bias"}) {
      out[ours + "attn_norm." + part] = same(theirs + "ln_1." + part, {d});
      out[ours + "ffn_norm." + part] = same(theirs + "ln_2." + part, {d});
    }
    const char* qkv[] = {"wq", "wk", "wv"};
    for (int64_t k = 0; k < 3; ++k) {
      out[ours + "attn." + qkv[k] + ".weight"] = {theirs + "attn.c_attn.weight", Layout::transposed, k * d, {d, 3 * d}, 0};
      out[ours + "attn." + qkv[k] + ".bias"] = {theirs + "attn.c_attn.bias", Layout::same, k * d, {3 * d}, 0};
    }
    out[ours + "attn.wo.weight"] = {theirs + "attn.c_proj.weight", Layout::transposed, 0, {d, d}, 0};
    out[ours + "attn.wo.bias"] = same(theirs + "attn.c_proj.bias", {d});
    out[ours + "ffn.up.weight"] = {theirs + "mlp.c_fc.weight", Layout::transposed, 0, {d, h}, 0};
    out[ours + "ffn.up.bias"] = same(theirs + "mlp.c_fc.bias", {h});
    out[ours + "ffn.down.weight"] = {theirs + "mlp.c_proj.weight", Layout::transposed, 0, {h, d}, 0};
    out[ours + "ffn.down.bias"] = same(theirs + "mlp.c_proj.bias", {d});
  }
  out["norm.weight"] = same(p + "ln_f.weight", {d});
  out["norm.bias"] = same(p + "ln_f.bias", {d});
}

void add_llama(std::map<std::string, HfSource>& out, const nn::TransformerConfig& c) {
  const int64_t d = c.dim, h = c.hidden(), hd = c.dim / c.n_heads, kv = c.kv_heads() * hd;
  out["tok_embeddings.weight"] = same("model.embed_tokens.weight", {c.vocab_size, d});
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string ours = fmt::format("layers.{}.", i), theirs = fmt::format("model.layers.{}.", i);
    out[ours + "attn_norm.weight"] = same(theirs + "input_layernorm.weight", {d});
    out[ours + "ffn_norm.weight"] = same(theirs + "post_attention_layernorm.weight", {d});
    out[ours + "attn.wq.weight"] = {theirs + "self_attn.q_proj.weight", Layout::rope_rows, 0, {d, d}, hd};
    out[ours + "attn.wk.weight"] = {theirs + "self_attn.k_proj.weight", Layout::rope_rows, 0, {kv, d}, hd};
    out[ours + "attn.wv.weight"] = same(theirs + "self_attn.v_proj.weight", {kv, d});
    out[ours + "attn.wo.weight"] = same(theirs + "self_attn.o_proj.weight", {d, d});
    out[ours + "ffn.gate.weight"] = same(theirs + "mlp.gate_proj.weight", {h, d});
    out[ours + "ffn.up.weight"] = same(theirs + "mlp.up_proj.weight", {h, d});
    out[ours + "ffn.down.weight"] = same(theirs + "mlp.down_proj.weight", {d, h});
  }
  out["norm.weight"] = same("model.norm.weight", {d});
}

}  // namespace

std::map<std::string, HfSource> hf_sources(const nn::TransformerConfig& config, const std::string& gpt2_prefix) {
  std::map<std::string, HfSource> out;
  if (config.style == nn::TransformerStyle::gpt2) {
    add_gpt2(out, config, gpt2_prefix);
  } else {
    add_llama(out, config);
  }
  if (!config.tie_weights) out["output.weight"] = same("lm_head.weight", {config.vocab_size, config.dim});
  return out;
}

Box hf_box_of(const HfSource& source, const Box& box) {
  switch (source.layout) {
    case Layout::same: {
      Box out = box;
      out.offset[0] += source.offset;
      return out;
    }
    case Layout::transposed:
      DTR_INTERNAL_ASSERT(box.offset.size() == 2, "transposed layout of a {}-d tensor", box.offset.size());
      return {{box.offset[1], source.offset + box.offset[0]}, {box.shape[1], box.shape[0]}};
    case Layout::rope_rows: {
      const int64_t hd = source.head_dim;
      const int64_t first = box.offset[0] / hd, end = (box.offset[0] + box.shape[0] + hd - 1) / hd;
      return {{first * hd, box.offset[1]}, {(end - first) * hd, box.shape[1]}};
    }
  }
  DTR_INTERNAL_ASSERT(false, "unknown HF layout");
  return box;
}

Tensor dtr_part_from_hf(const HfSource& source, const Box& box, const Tensor& read) {
  switch (source.layout) {
    case Layout::same: return read;
    case Layout::transposed: return read.t().contiguous();
    case Layout::rope_rows: {
      // Per head, transformers stores the first elements of all pairs, then the
      // second ones: rows (j, i) -> dtr's row 2i + j.
      const int64_t hd = source.head_dim, heads = read.size(0) / hd, cols = read.size(1);
      Tensor rows = read.reshape({heads, 2, hd / 2, cols}).transpose(1, 2).reshape({heads * hd, cols});
      return rows.narrow(0, box.offset[0] % hd, box.shape[0]).contiguous();
    }
  }
  DTR_INTERNAL_ASSERT(false, "unknown HF layout");
  return read;
}

Tensor hf_part_from_dtr(const HfSource& source, const Tensor& full) {
  switch (source.layout) {
    case Layout::same: return full;
    case Layout::transposed: return full.t().contiguous();
    case Layout::rope_rows: {
      const int64_t hd = source.head_dim, heads = full.size(0) / hd, cols = full.size(1);
      return full.reshape({heads, hd / 2, 2, cols}).transpose(1, 2).reshape({heads * hd, cols}).contiguous();
    }
  }
  DTR_INTERNAL_ASSERT(false, "unknown HF layout");
  return full;
}

}  // namespace dtr::checkpoint
