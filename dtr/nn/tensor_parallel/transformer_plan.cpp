#include "dtr/nn/tensor_parallel/transformer_plan.h"

#include "dtr/base/error.h"
#include "dtr/nn/tensor_parallel/parallelize_module.h"

#include <fmt/format.h>

namespace dtr::nn::tensor_parallel {

ParallelizePlan transformer_plan(const TransformerConfig& config, const TransformerPlanOptions& options) {
  const bool sp = options.sequence_parallel;
  // Under sequence parallelism the attention and the MLP gather their input from
  // sequence shards (once for their column-wise projections) and the row-wise
  // layers scatter their output into them.
  const Placement between = sp ? Placement(Shard(1)) : Placement(Replicate());
  const PrepareModuleInput gather{.input_layout = between, .grad_reduce_dtype = options.reduce_dtype};
  const ColwiseParallel colwise{.input_prepared = true};
  const SequenceParallel sequence{.grad_reduce_dtype = options.reduce_dtype};
  const RowwiseParallel rowwise{.output_layout = between};
  ParallelizePlan plan;
  if (options.vocab_parallel_embedding) plan.emplace_back("tok_embeddings", rowwise);
  for (int64_t i = 0; i < config.n_layers; ++i) {
    const std::string block = fmt::format("layers.{}.", i);
    if (sp) plan.emplace_back(block + "attn_norm", sequence);
    plan.emplace_back(block + "attn", gather);
    for (const char* projection : {"attn.wq", "attn.wk", "attn.wv"}) plan.emplace_back(block + projection, colwise);
    plan.emplace_back(block + "attn.wo", rowwise);
    if (sp) plan.emplace_back(block + "ffn_norm", sequence);
    plan.emplace_back(block + "ffn", gather);
    plan.emplace_back(block + "ffn.up", colwise);
    if (config.style == TransformerStyle::llama) plan.emplace_back(block + "ffn.gate", colwise);
    plan.emplace_back(block + "ffn.down", rowwise);
  }
  if (sp) plan.emplace_back("norm", sequence);
  if (!config.tie_weights && (options.loss_parallel || sp)) {
    // The logits sharded by vocabulary (loss parallelism), or whole.
    ColwiseParallel head{.input_layout = between, .grad_reduce_dtype = options.reduce_dtype};
    if (!options.loss_parallel) head.output_layout = Replicate();
    plan.emplace_back("output", head);
  }
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
  DTR_CHECK(!options.sequence_parallel || (options.vocab_parallel_embedding && !c.tie_weights &&
                                            c.style == TransformerStyle::llama),
            "parallelize_transformer: sequence_parallel needs vocab_parallel_embedding (the embedding scatters its "
            "lookups by sequence), an untied output head and no learned positions (Llama style); got "
            "vocab_parallel_embedding {}, tie_weights {}, style {}",
            options.vocab_parallel_embedding, c.tie_weights,
            c.style == TransformerStyle::llama ? "llama" : "gpt2");
  parallelize_module(model, mesh, transformer_plan(c, options));
  if (c.tie_weights && options.vocab_parallel_embedding) model.set_tied_head_grad_reduce_dtype(options.reduce_dtype);
}

}  // namespace dtr::nn::tensor_parallel
