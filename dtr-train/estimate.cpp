#include "estimate.h"

#include "dataset.h"

#include "dtr/checkpoint/hf_config.h"
#include "dtr/fsdp/memory_estimate.h"
#include "dtr/fsdp/wrap_policy.h"
#include "dtr/nn/transformer.h"
#include "dtr/nn/tensor_parallel/parallelize_module.h"
#include "dtr/nn/transformer_memory.h"
#include "dtr/tensor/allocator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>

namespace dtr::train {

namespace {

// ": tensor parallel 2 (sequence parallel) x FSDP over 4 ranks", or nothing without --tp.
std::string tensor_parallel_layout(const TrainConfig& c) {
  if (c.tp == 1) return "";
  return fmt::format(": {} x FSDP over {} ranks", tensor_parallel_text(c), c.world_size / c.tp);
}

}  // namespace

std::string estimate_report(const TrainConfig& c) {
  // The vocabulary is the data's unless the model's is larger: open (mmap) the
  // file only to read its format; the embedded corpus is bytes.
  const int64_t data_vocab = c.data.empty() ? 256 : TokenDataset::open(c.data, c.data_format).vocab_size();
  nn::TransformerConfig model =
      c.init_from.empty() ? model_config(c.model, data_vocab) : checkpoint::read_hf_config(c.init_from);
  const int64_t seq = c.seq_len > 0 ? c.seq_len : model.max_seq_len;
  model.max_seq_len = std::max(model.max_seq_len, seq);
  check_tensor_parallel(c, model, seq);
  fsdp::MemoryEstimateOptions options{
      .strategy = c.reshard_after_forward ? fsdp::ShardingStrategy::full_shard : fsdp::ShardingStrategy::shard_grad_op,
      .rank = 0,
      .batch_size = c.micro_batch,
      .seq_len = seq,
      .activation_checkpointing = c.activation_checkpointing};
  switch (c.mixed_precision) {
    case MixedPrecision::none:
      break;
    case MixedPrecision::bf16:
      options.param_dtype = DType::bf16;
      break;
  }
  // Shapes only: the model on the meta device holds no memory.
  nn::TransformerConfig meta = model;
  meta.device = Device::meta();
  nn::Transformer meta_model(meta);
  const fsdp::WrapPolicy blocks = fsdp::module_type_policy<nn::TransformerBlock>();
  // --tp: rank 0 of the first tensor-parallel group; FSDP shards its splits over
  // the data-parallel ranks.
  const nn::tensor_parallel::TransformerPlanOptions plan = tensor_parallel_plan(c);
  if (c.tp > 1) {
    options.tensor_parallel_shapes =
        nn::tensor_parallel::local_parameter_shapes(meta_model, nn::tensor_parallel::transformer_plan(meta, plan), c.tp, 0);
  }
  const fsdp::ActivationModel activations = [&](int64_t batch, int64_t seq_len, std::optional<DType> dtype, bool ckpt) {
    return nn::estimate_tensor_parallel_activation_bytes(model, c.tp, plan, batch, seq_len, dtype, ckpt);
  };
  const int dp_ranks = static_cast<int>(c.world_size / c.tp);
  const fsdp::MemoryEstimate e = fsdp::estimate_memory(meta_model, blocks, dp_ranks, options, activations);
  const int64_t num_params = meta_model.num_parameters();

  std::string out = fmt::format(
      "dtr-train --estimate-only: model {} ({} style, {} parameters = {:.2f}B, dim {}, {} layers, {} heads, "
      "{} kv heads, ffn {}, vocab {}) on {} rank(s){}\n"
      "  per rank: micro-batch {} x {} tokens, mixed precision {}, activation checkpointing {}, "
      "reshard_after_forward {}; {} FSDP groups (one per block, then the root)\n",
      to_string(c.model), to_string(model.style), num_params, static_cast<double>(num_params) / 1e9, model.dim,
      model.n_layers, model.n_heads, model.kv_heads(), model.hidden(), model.vocab_size, c.world_size,
      tensor_parallel_layout(c), c.micro_batch, seq, to_string(c.mixed_precision),
      c.activation_checkpointing ? "on" : "off", c.reshard_after_forward, e.groups.size());
  out += fmt::format("per-rank estimate of this configuration (rank 0):\n{}", e.to_string());
  out += fmt::format("\n{}", fsdp::memory_table(meta_model, blocks, dp_ranks, options, activations));
  // Estimates only: the meta-device model has no storage. Say how much this
  // process allocated, so a run can check that nothing was materialised.
  const MemoryStats stats = memory_stats(Device::cpu());
  out += fmt::format("\ntensor memory this process allocated while estimating: peak {} B\n", stats.total.peak_bytes);
  return out;
}

int run_estimate(const TrainConfig& c, int rank) {
  std::string report;
  try {
    report = estimate_report(c);
  } catch (const std::exception& e) {
    if (rank == 0) std::fprintf(stderr, "dtr-train: --estimate-only: %s\n", e.what());
    return 2;
  }
  if (rank == 0) {
    std::fputs(report.c_str(), stdout);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace dtr::train
