#include "fsdp/memory_estimate.h"

#include "dtensor/error.h"

#include <fmt/format.h>

#include <algorithm>

namespace dtr::fsdp {

namespace {

struct Layout {
  std::string name;
  int shard_ranks = 1;
  int shard_index = 0;
  bool reshard_after_forward = true;
};

Layout layout_of(const MemoryEstimateOptions& o, int world_size) {
  DTR_CHECK(world_size >= 1, "estimate_memory: expected a positive world size, got {}", world_size);
  DTR_CHECK(o.rank >= 0 && o.rank < world_size, "estimate_memory: rank {} is not in [0, {})", o.rank, world_size);
  Layout l;
  switch (o.strategy) {
    case ShardingStrategy::full_shard: l = {"FULL_SHARD", world_size, o.rank, true}; break;
    case ShardingStrategy::shard_grad_op: l = {"SHARD_GRAD_OP", world_size, o.rank, false}; break;
    case ShardingStrategy::no_shard: l = {"NO_SHARD", 1, 0, false}; break;
    case ShardingStrategy::hybrid_shard: {
      const int k = o.hybrid_shard_size > 0 ? o.hybrid_shard_size : (world_size % 2 == 0 ? 2 : 1);
      DTR_CHECK(world_size % k == 0, "estimate_memory: hybrid shard size {} must divide the world size {}", k,
                world_size);
      // Mesh (world / k, k) in row-major order: the shard coordinate is rank % k.
      l = {fmt::format("HYBRID_SHARD({})", k), k, o.rank % k, true};
      break;
    }
  }
  return l;
}

int64_t logical_numel(const Tensor& t) { return t.dtensor_spec() ? numel_of(t.dtensor_spec()->shape) : t.numel(); }
Shape logical_shape(const Tensor& t) { return t.dtensor_spec() ? t.dtensor_spec()->shape : t.sizes(); }

void add_unique(std::vector<Tensor>& into, const Tensor& t) {
  if (std::none_of(into.begin(), into.end(), [&](const Tensor& o) { return o.is_same(t); })) into.push_back(t);
}

bool contains(const std::vector<Tensor>& v, const Tensor& t) {
  return std::any_of(v.begin(), v.end(), [&](const Tensor& o) { return o.is_same(t); });
}

int64_t size_of(DType d) { return static_cast<int64_t>(element_size(d)); }

}  // namespace

// The activation model. Counted in elements of the compute dtype c (mp
// param_dtype, else the config's dtype) unless noted; attention keeps f32
// (f64 for f64) copies ("acc"). BT = batch x sequence, D = dim, H = ffn hidden,
// kvD = kv heads x head dim, V = vocab.
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
//   tests/mpi/memory_estimate_test.cpp. The head's backward (the logits'
//   gradient and a softmax temporary, 2 x BT x V) is taken when larger.
//   With activation checkpointing a block keeps only its output (the next block's
//   input); its backward recomputes its forward, so the peak is everything kept
//   plus one block's activations plus its backward transient.
//   Not counted: parameter-gradient temporaries (not at the peak here), dropout
//   masks (dropout > 0), the token ids made before the step, the loss scalar.
int64_t estimate_activation_bytes(const nn::TransformerConfig& cfg, int64_t batch_size, int64_t seq_len,
                                  std::optional<DType> param_dtype, bool activation_checkpointing) {
  const int64_t T = seq_len > 0 ? seq_len : cfg.max_seq_len;
  const int64_t BT = batch_size * T, D = cfg.dim, H = cfg.hidden(), V = cfg.vocab_size, L = cfg.n_layers;
  const int64_t hd = D / cfg.n_heads, kvD = cfg.kv_heads() * hd, nh = cfg.n_heads;
  const DType compute = param_dtype.value_or(cfg.dtype);
  const int64_t c = size_of(compute), a = compute == DType::f64 ? 8 : 4;
  const bool llama = cfg.style == nn::TransformerStyle::llama;
  const int64_t stats_per_norm = llama ? 1 : 2;  // RMSNorm: 1/rms; LayerNorm: mean and 1/std
  const int64_t block = BT * ((5 * D + (llama ? 4 : 2) * H) * c + (2 * D + 2 * kvD) * a + nh * a +
                              2 * stats_per_norm * a);
  const int64_t block_output = BT * D * c;
  // GPT-2 also keeps the i64 positions [T] (the position embedding's indices).
  const int64_t root = BT * (2 * D + V) * c + BT * stats_per_norm * a + 2 * BT * a + (llama ? 0 : T * 8);
  const int64_t head_backward = 2 * BT * V * c;
  const int64_t ffn_backward = (2 * D + (llama ? 3 : 2) * H) * c;
  const int64_t attention_backward = (2 * D + 2 * kvD) * a + (c < a ? (D + 2 * kvD) * c : 0);
  const int64_t block_backward = BT * std::max(ffn_backward, attention_backward);
  if (!activation_checkpointing) return root + L * block + std::max(head_backward, block_backward);
  const int64_t kept = root + L * block_output;
  return kept + std::max(head_backward, block + block_backward);
}

MemoryEstimate estimate_memory(nn::Module& model, const WrapPolicy& policy, int world_size,
                               const MemoryEstimateOptions& options) {
  const Layout l = layout_of(options, world_size);
  MemoryEstimate e;
  e.strategy = l.name;
  e.world_size = world_size;
  e.shard_ranks = l.shard_ranks;
  // Groups as apply_fully_shard makes them: each selected module takes its
  // subtree's parameters not taken before (post-order), the root the rest.
  std::vector<std::pair<std::string, nn::Module*>> order = select_modules(model, policy);
  order.emplace_back("", &model);
  std::vector<Tensor> claimed;
  const int64_t k = l.shard_ranks;
  for (auto& [path, m] : order) {
    GroupEstimate g;
    g.path = path;
    std::optional<DType> group_compute;
    for (auto& [name, p] : m->named_parameters()) {
      if (contains(claimed, p)) continue;
      add_unique(claimed, p);
      const Shape shape = logical_shape(p);
      DTR_CHECK(!shape.empty(), "estimate_memory: parameter '{}' is 0-dim (fully_shard needs dim 0)", name);
      const int64_t rows = shape[0], row_numel = logical_numel(p) / std::max<int64_t>(rows, 1);
      const int64_t chunk = (rows + k - 1) / k;
      const int64_t local_rows = std::clamp<int64_t>(rows - l.shard_index * chunk, 0, chunk);
      const DType compute = options.param_dtype && is_floating(p.dtype()) ? *options.param_dtype : p.dtype();
      group_compute = compute;
      g.numel += logical_numel(p);
      g.shard_numel += local_rows * row_numel;
      g.flat_numel += chunk * row_numel;
      e.params += local_rows * row_numel * size_of(p.dtype());
    }
    g.unsharded_bytes = group_compute ? k * g.flat_numel * size_of(*group_compute) : 0;
    e.num_params += g.numel;
    e.groups.push_back(g);
  }
  e.grads = e.params;
  e.optimizer_state = 2 * e.params;  // AdamW: exp_avg and exp_avg_sq
  if (l.reshard_after_forward) {
    std::vector<int64_t> others;
    for (size_t i = 0; i + 1 < e.groups.size(); ++i) others.push_back(e.groups[i].unsharded_bytes);
    std::sort(others.rbegin(), others.rend());
    e.unsharded_peak = e.groups.back().unsharded_bytes;
    if (!others.empty()) e.unsharded_peak += others.front();
  } else {
    for (auto& g : e.groups) e.unsharded_peak += g.unsharded_bytes;
  }
  return e;
}

MemoryEstimate estimate_memory(const nn::TransformerConfig& config, int world_size,
                               const MemoryEstimateOptions& options) {
  nn::TransformerConfig meta = config;
  meta.device = Device::meta();  // shapes only: no memory
  nn::Transformer model(meta);
  MemoryEstimate e = estimate_memory(model, module_type_policy<nn::TransformerBlock>(), world_size, options);
  e.activations_no_ckpt =
      estimate_activation_bytes(config, options.batch_size, options.seq_len, options.param_dtype, false);
  e.activations_ckpt =
      estimate_activation_bytes(config, options.batch_size, options.seq_len, options.param_dtype, true);
  e.activations = options.activation_checkpointing ? e.activations_ckpt : e.activations_no_ckpt;
  return e;
}

namespace {

std::string gib(int64_t bytes) { return fmt::format("{:.3f}", static_cast<double>(bytes) / (1024.0 * 1024 * 1024)); }

}  // namespace

std::string MemoryEstimate::to_string() const {
  std::string out = fmt::format("{} over {} ranks (parameters split over {}), {} params, {} groups\n", strategy,
                                world_size, shard_ranks, num_params, groups.size());
  out += fmt::format("  params          {:>16} B  ({} GiB)\n", params, gib(params));
  out += fmt::format("  grads           {:>16} B  ({} GiB)\n", grads, gib(grads));
  out += fmt::format("  optimizer_state {:>16} B  ({} GiB)\n", optimizer_state, gib(optimizer_state));
  out += fmt::format("  unsharded_peak  {:>16} B  ({} GiB)\n", unsharded_peak, gib(unsharded_peak));
  out += fmt::format("  activations     {:>16} B  ({} GiB; no ckpt {}, ckpt {})\n", activations, gib(activations),
                     gib(activations_no_ckpt), gib(activations_ckpt));
  out += fmt::format("  total           {:>16} B  ({} GiB)\n", total(), gib(total()));
  return out;
}

std::string memory_table(const nn::TransformerConfig& config, int world_size, MemoryEstimateOptions base) {
  const int64_t T = base.seq_len > 0 ? base.seq_len : config.max_seq_len;
  std::string out = fmt::format(
      "per-rank memory estimate (GiB): {} ranks, batch {} x seq {} per rank, param dtype {}, compute {}\n",
      world_size, base.batch_size, T, dtype_name(config.dtype), dtype_name(base.param_dtype.value_or(config.dtype)));
  out += fmt::format("{:<18} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "strategy", "ckpt", "params",
                     "grads", "optim", "unsharded", "activ", "total", "params(#)");
  for (ShardingStrategy s : {ShardingStrategy::full_shard, ShardingStrategy::shard_grad_op, ShardingStrategy::no_shard,
                             ShardingStrategy::hybrid_shard}) {
    for (bool ckpt : {false, true}) {
      MemoryEstimateOptions o = base;
      o.strategy = s;
      o.activation_checkpointing = ckpt;
      const MemoryEstimate e = estimate_memory(config, world_size, o);
      out += fmt::format("{:<18} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n", e.strategy,
                         ckpt ? "yes" : "no", gib(e.params), gib(e.grads), gib(e.optimizer_state),
                         gib(e.unsharded_peak), gib(e.activations), gib(e.total()), e.num_params);
    }
  }
  return out;
}

}  // namespace dtr::fsdp
