#include "dtr/nn/transformer_memory.h"

#include "dtr/base/error.h"

#include <algorithm>

namespace dtr::nn {

// Counted in elements of the compute dtype c (mp param_dtype, else the config's
// dtype) unless noted; attention keeps f32 (f64 for f64) copies ("acc").
// BT = batch x sequence, D = dim, H = ffn hidden, kvD = kv heads x head dim,
// V = vocab.
//   One block keeps for backward (llama): attn_norm output D, attention's
//   contiguous q, k, v and its output in acc (2D + 2kvD, plus log-sum-exp per
//   head), the re-laid-out attention output D (wo's input), the residual sum D,
//   ffn_norm output D, SwiGLU's gate, silu, up and product 4H, the block output
//   D, and two norm statistics per row. GPT-2: the same with LayerNorm statistics
//   and the GELU MLP's up output and GELU output (2H).
//   The root keeps the embedding output (llama; GPT-2: the sum with positions),
//   the final norm's output and statistics, the logits V and cross entropy's
//   per-row statistics.
//   The peak is in the backward of the last block, while everything forward kept
//   is still alive, in the larger of two transients per row:
//   - the feed-forward's: 2D + 3H (SwiGLU) or 2D + 2H (GELU) elements of c (the
//     gradients of the hidden activations, the one-pass activation gradient, the
//     input's gradient);
//   - attention's: dout, dq, dk and dv in acc (2D + 2kvD), plus their casts back
//     to c (D + 2kvD) when c is narrower than acc.
//   These were measured on this runtime (the peak minus what forward kept, which
//   this model counts exactly), for the llama and GPT-2 shapes of
//   tests/fsdp/memory_estimate_measured_test.cpp. The head's backward (the logits'
//   gradient and a softmax temporary, 2 x BT x V) is taken when larger.
//   With activation checkpointing a block keeps only its output (the next block's
//   input); its backward recomputes its forward, so the peak is everything kept
//   plus one block's activations plus its backward transient.
int64_t estimate_activation_bytes(const TransformerConfig& cfg, int64_t batch_size, int64_t seq_len,
                                  std::optional<DType> compute_dtype, bool activation_checkpointing) {
  return estimate_tensor_parallel_activation_bytes(cfg, 1, {}, batch_size, seq_len, compute_dtype,
                                                   activation_checkpointing);
}

// Tensor parallelism over t ranks divides what is per head or per hidden feature
// (q, k, v, attention's output, the MLP's hidden activations, their gradients)
// by t. The inputs of the column-wise projections stay whole (gathered from
// sequence shards under sequence parallelism); the residual stream, the norms'
// statistics and the block outputs are divided by t only under sequence
// parallelism (s = t). Loss parallelism divides the logits by t; its loss keeps
// exp(logits - max) and the target mask, two slices, instead of the logits. The
// sums of the input gradients over the ranks add one whole [BT, D] gradient to
// each backward transient.
int64_t estimate_tensor_parallel_activation_bytes(const TransformerConfig& cfg, int64_t tp_ranks,
                                                  const tensor_parallel::TransformerPlanOptions& plan,
                                                  int64_t batch_size, int64_t seq_len,
                                                  std::optional<DType> compute_dtype, bool activation_checkpointing) {
  DTR_CHECK(tp_ranks >= 1 && cfg.n_heads % tp_ranks == 0 && cfg.kv_heads() % tp_ranks == 0,
            "estimate_tensor_parallel_activation_bytes: the {} heads ({} key/value heads) do not divide by {} "
            "tensor-parallel ranks",
            cfg.n_heads, cfg.kv_heads(), tp_ranks);
  const int64_t T = seq_len > 0 ? seq_len : cfg.max_seq_len;
  const int64_t BT = batch_size * T, D = cfg.dim, L = cfg.n_layers, t = tp_ranks;
  const int64_t s = plan.sequence_parallel ? t : 1;
  const int64_t H = cfg.hidden() / t, hd = D / cfg.n_heads, nh = cfg.n_heads / t, kvD = cfg.kv_heads() / t * hd;
  const int64_t heads_D = nh * hd;  // this rank's share of the attention features
  const int64_t V = plan.loss_parallel ? (cfg.vocab_size + t - 1) / t : cfg.vocab_size;
  const DType compute = compute_dtype.value_or(cfg.dtype);
  const int64_t c = static_cast<int64_t>(element_size(compute)), a = compute == DType::f64 ? 8 : 4;
  const bool llama = cfg.style == TransformerStyle::llama;
  const int64_t stats_per_norm = llama ? 1 : 2;  // RMSNorm: 1/rms; LayerNorm: mean and 1/std
  const int64_t block = BT * ((2 * D + 2 * D / s + heads_D + (llama ? 4 : 2) * H) * c +
                              (2 * heads_D + 2 * kvD) * a + nh * a + 2 * stats_per_norm * a / s);
  const int64_t block_output = BT * D / s * c;
  // GPT-2 also keeps the i64 positions [T] (the position embedding's indices).
  const int64_t loss = plan.loss_parallel ? 2 * BT * V * c : BT * V * c + 2 * BT * a;
  const int64_t root = BT * (D / s + D) * c + loss + BT * stats_per_norm * a / s + (llama ? 0 : T * 8);
  const int64_t head_backward = 2 * BT * V * c;
  const int64_t input_grad_sum = t > 1 ? D : 0;
  const int64_t ffn_backward = (2 * D + input_grad_sum + (llama ? 3 : 2) * H) * c;
  const int64_t attention_backward =
      (2 * heads_D + 2 * kvD) * a + (c < a ? (heads_D + 2 * kvD) * c : 0) + input_grad_sum * c;
  const int64_t block_backward = BT * std::max(ffn_backward, attention_backward);
  if (!activation_checkpointing) return root + L * block + std::max(head_backward, block_backward);
  const int64_t kept = root + L * block_output;
  return kept + std::max(head_backward, block + block_backward);
}

}  // namespace dtr::nn
