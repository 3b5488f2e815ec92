#include "dtr/nn/tensor_parallel/transformer_plan.h"

#include "dtr/base/error.h"
#include "dtr/nn/tensor_parallel/parallelize_module.h"

#include <fmt/format.h>

namespace dtr::nn::tensor_parallel {

ParallelizePlan transformer_plan(const TransformerConfig& config, const TransformerPlanOptions& options) {
  ParallelizePlan plan;
  for (int64_t i = 0; i < config.n_layers; ++i) {
    const std::string block = fmt::format("layers.{}.", i);
    for (const char* projection : {"attn.wq", "attn.wk", "attn.wv"}) {
      plan.emplace_back(block + projection, ColwiseParallel{});
    }
    plan.emplace_back(block + "attn.wo", RowwiseParallel{});
    plan.emplace_back(block + "ffn.up", ColwiseParallel{});
    if (config.style == TransformerStyle::llama) plan.emplace_back(block + "ffn.gate", ColwiseParallel{});
    plan.emplace_back(block + "ffn.down", RowwiseParallel{});
  }
  if (options.vocab_parallel_embedding) plan.emplace_back("tok_embeddings", RowwiseParallel{});
  if (options.loss_parallel && !config.tie_weights) plan.emplace_back("output", ColwiseParallel{});
  return plan;
}

void parallelize_transformer(Transformer& model, const mesh::DeviceMesh& mesh, const TransformerPlanOptions& options) {
  DTR_CHECK(mesh.ndim() == 1, "parallelize_transformer: expected a 1-D tensor-parallel mesh, got {} dims",
            mesh.ndim());
  const TransformerConfig& c = model.config();
  const int64_t ranks = mesh.size(0);
  DTR_CHECK(c.n_heads % ranks == 0,
            "parallelize_transformer: n_heads {} does not divide by the tensor-parallel size {}: each rank computes "
            "whole heads",
            c.n_heads, ranks);
  DTR_CHECK(c.kv_heads() % ranks == 0,
            "parallelize_transformer: the {} key/value heads (n_kv_heads) do not divide by the tensor-parallel size "
            "{}: each rank computes whole heads",
            c.kv_heads(), ranks);
  DTR_CHECK(!c.tie_weights || options.loss_parallel == options.vocab_parallel_embedding,
            "parallelize_transformer: this model ties its output head to the token embedding (tie_weights), so "
            "loss_parallel (the head sharded by vocabulary) and vocab_parallel_embedding (the table sharded by "
            "vocabulary) go together; got loss_parallel {} and vocab_parallel_embedding {}",
            options.loss_parallel, options.vocab_parallel_embedding);
  parallelize_module(model, mesh, transformer_plan(c, options));
}

}  // namespace dtr::nn::tensor_parallel
