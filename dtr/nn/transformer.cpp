#include "dtr/nn/transformer.h"

#include "dtr/dtensor/sharding/grad_sync.h"

#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/attention.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/matmul.h"
#include "dtr/tensor/ops/rope.h"

#include <cmath>

namespace dtr::nn {

namespace {

constexpr double kInitStd = 0.02;

double residual_std(const TransformerConfig& c) {
  return kInitStd / std::sqrt(2.0 * static_cast<double>(c.n_layers));
}

Device device_of(const TransformerConfig& c) { return c.device.value_or(default_device()); }

LinearOptions linear_options(const TransformerConfig& c, double std) {
  return {.bias = c.style == TransformerStyle::gpt2, .init_std = std, .dtype = c.dtype, .device = device_of(c)};
}

LayerOptions layer_options(const TransformerConfig& c) { return {.dtype = c.dtype, .device = device_of(c)}; }

ModulePtr make_norm(const TransformerConfig& c) {
  if (c.style == TransformerStyle::llama) return std::make_shared<RMSNorm>(c.dim, c.norm_eps, layer_options(c));
  return std::make_shared<LayerNorm>(c.dim, c.norm_eps, true, layer_options(c));
}

void check_config(const TransformerConfig& c) {
  DTR_CHECK(c.vocab_size > 0 && c.dim > 0 && c.n_layers > 0 && c.n_heads > 0 && c.max_seq_len > 0,
            "TransformerConfig: sizes must be positive (vocab {}, dim {}, layers {}, heads {}, "
            "max_seq_len {})",
            c.vocab_size, c.dim, c.n_layers, c.n_heads, c.max_seq_len);
  DTR_CHECK(c.dim % c.n_heads == 0, "TransformerConfig: dim {} is not a multiple of n_heads {}", c.dim,
            c.n_heads);
  DTR_CHECK(c.n_heads % c.kv_heads() == 0, "TransformerConfig: n_heads {} is not a multiple of n_kv_heads {}",
            c.n_heads, c.kv_heads());
  DTR_CHECK(c.style == TransformerStyle::llama || c.kv_heads() == c.n_heads,
            "TransformerConfig: grouped-query heads (n_kv_heads) are for the llama style only");
  DTR_CHECK((c.dim / c.n_heads) % 2 == 0 || c.style == TransformerStyle::gpt2,
            "TransformerConfig: rotary embeddings need an even head dim, got {}", c.dim / c.n_heads);
}

}  // namespace

TransformerConfig TransformerConfig::gpt2_124m() {
  return {.style = TransformerStyle::gpt2, .vocab_size = 50257, .dim = 768, .n_layers = 12, .n_heads = 12,
          .max_seq_len = 1024, .tie_weights = true};
}

int64_t TransformerConfig::hidden() const {
  if (ffn_hidden > 0) return ffn_hidden;
  if (style == TransformerStyle::gpt2) return 4 * dim;
  const int64_t h = 2 * (4 * dim) / 3;
  return (h + 31) / 32 * 32;
}

Attention::Attention(const TransformerConfig& c) : config_(c) {
  const int64_t head_dim = c.dim / c.n_heads;
  wq_ = register_module("wq", std::make_shared<Linear>(c.dim, c.n_heads * head_dim, linear_options(c, kInitStd)));
  wk_ = register_module("wk", std::make_shared<Linear>(c.dim, c.kv_heads() * head_dim, linear_options(c, kInitStd)));
  wv_ = register_module("wv", std::make_shared<Linear>(c.dim, c.kv_heads() * head_dim, linear_options(c, kInitStd)));
  wo_ = register_module("wo", std::make_shared<Linear>(c.n_heads * head_dim, c.dim, linear_options(c, residual_std(c))));
}

Tensor Attention::forward(const Tensor& x) {
  DTR_CHECK(x.dim() == 3 && x.size(2) == config_.dim, "Attention: expected [B, T, {}], got {}", config_.dim,
            shape_str(x.sizes()));
  const int64_t hd = config_.dim / config_.n_heads;
  // Head counts (and the sequence length) come from the projections' outputs, so
  // a tensor-parallel attention (wq/wk/wv column-sharded by whole heads, their
  // input gathered from sequence shards under sequence parallelism) computes its
  // local heads over the whole sequence.
  Tensor q = (*wq_)(x), k = (*wk_)(x), v = (*wv_)(x);
  const int64_t b = q.size(0), t = q.size(1);
  DTR_CHECK(q.size(2) % hd == 0 && k.size(2) % hd == 0,
            "Attention: projections of {} and {} features do not split into heads of {} (with tensor "
            "parallelism, shard whole heads: n_heads and kv heads divisible by the mesh size)",
            q.size(2), k.size(2), hd);
  q = q.view({b, t, q.size(2) / hd, hd});
  k = k.view({b, t, k.size(2) / hd, hd});
  v = v.view({b, t, v.size(2) / hd, hd});
  if (config_.style == TransformerStyle::llama) {
    q = rope(q, config_.rope_theta);
    k = rope(k, config_.rope_theta);
  }
  Tensor y = scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                          /*causal=*/true);
  return (*wo_)(y.transpose(1, 2).reshape({b, t, q.size(2) * hd}));
}

FeedForward::FeedForward(const TransformerConfig& c) : style_(c.style) {
  const int64_t h = c.hidden();
  LinearOptions up_options = linear_options(c, kInitStd);
  // GPT-2's GELU runs in the up projection's GEMM epilogue.
  if (style_ == TransformerStyle::gpt2) up_options.activation = LinearActivation::gelu_tanh;
  up_ = register_module("up", std::make_shared<Linear>(c.dim, h, up_options));
  if (style_ == TransformerStyle::llama) {
    gate_ = register_module("gate", std::make_shared<Linear>(c.dim, h, linear_options(c, kInitStd)));
  }
  down_ = register_module("down", std::make_shared<Linear>(h, c.dim, linear_options(c, residual_std(c))));
}

Tensor FeedForward::forward(const Tensor& x) {
  if (style_ == TransformerStyle::llama) return (*down_)(silu((*gate_)(x)) * (*up_)(x));  // SwiGLU
  return (*down_)((*up_)(x));  // up applies GELU (tanh form)
}

TransformerBlock::TransformerBlock(const TransformerConfig& c) {
  attn_norm_ = register_module("attn_norm", make_norm(c));
  attn_ = register_module("attn", std::make_shared<Attention>(c));
  ffn_norm_ = register_module("ffn_norm", make_norm(c));
  ffn_ = register_module("ffn", std::make_shared<FeedForward>(c));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(c.dropout));
}

Tensor TransformerBlock::forward(const Tensor& x) {
  Tensor h = x + (*dropout_)((*attn_)((*attn_norm_)(x)));
  return h + (*dropout_)((*ffn_)((*ffn_norm_)(h)));
}

Transformer::Transformer(const TransformerConfig& c) : config_(c) {
  check_config(c);
  tok_embeddings_ = register_module("tok_embeddings",
                                    std::make_shared<Embedding>(c.vocab_size, c.dim, kInitStd, layer_options(c)));
  if (c.style == TransformerStyle::gpt2) {
    pos_embeddings_ = register_module("pos_embeddings",
                                      std::make_shared<Embedding>(c.max_seq_len, c.dim, kInitStd, layer_options(c)));
  }
  layers_ = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.n_layers; ++i) layers_->push_back(std::make_shared<TransformerBlock>(c));
  norm_ = register_module("norm", make_norm(c));
  if (!c.tie_weights) {
    output_ = register_module("output", std::make_shared<Linear>(
                                            c.dim, c.vocab_size,
                                            LinearOptions{.bias = false, .init_std = kInitStd, .dtype = c.dtype, .device = device_of(c)}));
  }
}

Tensor Transformer::forward(const Tensor& tokens) {
  DTR_CHECK(tokens.dim() == 2 && tokens.dtype() == DType::i64,
            "Transformer: expected i64 token ids [B, T], got {} {}", tokens.dtype(), shape_str(tokens.sizes()));
  DTR_CHECK(tokens.size(1) <= config_.max_seq_len, "Transformer: sequence length {} exceeds max_seq_len {}",
            tokens.size(1), config_.max_seq_len);
  Tensor h = (*tok_embeddings_)(tokens);
  if (pos_embeddings_) {
    Tensor positions = arange(tokens.size(1), {.dtype = DType::i64, .device = tokens.device()});
    h = h + (*pos_embeddings_)(positions);
  }
  for (const ModulePtr& layer : *layers_) h = (*layer)(h);
  h = (*norm_)(h);
  if (output_) return (*output_)(h);
  // The tied head. A vocabulary-parallel embedding (tensor_parallel/transformer_plan.h)
  // holds this rank's rows: the logits are this rank's vocabulary slice, and h's
  // gradient is the sum of every rank's part.
  const Tensor& table = tok_embeddings_->parameter("weight");
  if (table.size(0) != config_.vocab_size) {
    h = dtensor::all_reduce_grad(h, tok_embeddings_->parameter_handle("weight").sharding()->mesh, {0},
                                 tied_head_grad_reduce_dtype_);
  }
  return matmul(h, table.t());
}

}  // namespace dtr::nn
