// Decoder-only transformers: a Llama-style model (RMSNorm, rotary attention with
// grouped-query heads, SwiGLU feed-forward) and a GPT-2-style one (LayerNorm,
// learned positions, GELU MLP), chosen by TransformerConfig::style.
//
// Transformer::forward takes i64 token ids [B, T] and returns logits [B, T, vocab].
// Blocks are pre-norm: x + attn(norm(x)), then x + ffn(norm(x)).
// Initialisation (GPT-2 / Llama practice): every Linear and Embedding weight is
// normal(0, 0.02), biases 0, and the two residual output projections (attention
// wo, feed-forward down) normal(0, 0.02 / sqrt(2 * n_layers)); norms start at 1.
// With tie_weights the output head reuses the token embedding matrix.
#pragma once

#include "dtr/nn/container.h"
#include "dtr/nn/layers.h"
#include "dtr/nn/linear.h"

#include <optional>

namespace dtr::nn {

enum class TransformerStyle { llama, gpt2 };

struct TransformerConfig {
  TransformerStyle style = TransformerStyle::llama;
  int64_t vocab_size = 256;
  int64_t dim = 64;
  int64_t n_layers = 2;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 0;   // 0: same as n_heads (no grouping); llama only
  int64_t ffn_hidden = 0;   // 0: 4 * dim (gpt2) or the Llama rule 2/3 * 4 * dim, rounded up to 32
  int64_t max_seq_len = 256;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  double dropout = 0.0;
  bool tie_weights = false;
  DType dtype = DType::f32;
  std::optional<Device> device{};  // unset: the default device when the model is built

  // The GPT-2 124M shape (12 layers, 768 wide, 12 heads, 50257 tokens, 1024 positions).
  static TransformerConfig gpt2_124m();
  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t hidden() const;
};

class Attention : public Module {
 public:
  explicit Attention(const TransformerConfig& config);
  std::string type_name() const override { return "Attention"; }
  Tensor forward(const Tensor& x) override;  // [B, T, dim] -> [B, T, dim], causal

 private:
  TransformerConfig config_;
  std::shared_ptr<Linear> wq_, wk_, wv_, wo_;
};

class FeedForward : public Module {
 public:
  explicit FeedForward(const TransformerConfig& config);
  std::string type_name() const override { return "FeedForward"; }
  Tensor forward(const Tensor& x) override;

 private:
  TransformerStyle style_;
  std::shared_ptr<Linear> up_, gate_, down_;  // gate_ only for SwiGLU
};

class TransformerBlock : public Module {
 public:
  explicit TransformerBlock(const TransformerConfig& config);
  std::string type_name() const override { return "TransformerBlock"; }
  Tensor forward(const Tensor& x) override;

 private:
  ModulePtr attn_norm_, attn_, ffn_norm_, ffn_;
  std::shared_ptr<Dropout> dropout_;
};

class Transformer : public Module {
 public:
  explicit Transformer(const TransformerConfig& config);
  std::string type_name() const override { return "Transformer"; }
  Tensor forward(const Tensor& tokens) override;
  const TransformerConfig& config() const { return config_; }
  ModuleList& layers() { return *layers_; }
  // With a vocabulary-parallel embedding, the tied head sums the final norm
  // output's gradient over the tensor-parallel ranks; this is the dtype of that
  // sum (mixed precision's reduce dtype; unset: the gradient's own).
  // tensor_parallel::parallelize_transformer sets it.
  void set_tied_head_grad_reduce_dtype(std::optional<DType> dtype) { tied_head_grad_reduce_dtype_ = dtype; }

 private:
  TransformerConfig config_;
  std::shared_ptr<Embedding> tok_embeddings_, pos_embeddings_;
  std::shared_ptr<ModuleList> layers_;
  ModulePtr norm_;
  std::shared_ptr<Linear> output_;
  std::optional<DType> tied_head_grad_reduce_dtype_;
};

}  // namespace dtr::nn
