// The tensor-parallel plan of the built-in Transformer (dtr/nn/transformer.h),
// laid out as Megatron-LM and torchtitan lay out a decoder: in every block the
// attention's q, k and v projections and the feed-forward's up (and Llama's
// gate) projection are ColwiseParallel, the attention output and the
// feed-forward's down projection RowwiseParallel; the attention and the
// feed-forward take their input through PrepareModuleInput, so each sums its
// input's gradient once for all its projections. Each rank computes its own
// heads and its slice of the hidden features, and a block all-reduces twice in
// forward and twice in backward. The embeddings, the norms and the output head
// stay whole on every rank (their gradients are the same on every rank, so
// their updates are too).
//
//   namespace tp = dtr::nn::tensor_parallel;
//   auto mesh = mesh::init_device_mesh(DeviceType::cpu, {world_size}, {"tp"});
//   tp::parallelize_transformer(model, mesh);   // every rank, the same full model
//
// With vocab_parallel_embedding, the token embedding is RowwiseParallel: each
// rank holds its rows of the table and the lookups are all-reduced. With
// loss_parallel, the output head is ColwiseParallel: the model returns this
// rank's vocabulary slice of the logits, for vocab_parallel_cross_entropy
// (loss_parallel.h). A head tied to the embedding (GPT-2) shares its table, so
// the two are on together or off together.
//
// With sequence_parallel (Megatron's, as torchtitan applies it), the
// activations between the blocks' projections are sharded by sequence (dim 1):
// the norms compute on this rank's tokens (SequenceParallel), the attention and
// the feed-forward all-gather their input (and reduce-scatter its gradient),
// the row-wise layers reduce-scatter their output instead of all-reducing it,
// and the embedding (then vocabulary-
// parallel) reduce-scatters its lookups. The sequence length must divide by the
// mesh size. It needs an untied head and no learned positions (Llama style).
//
// Each rank holds whole heads: the attention heads and the key/value heads (GQA)
// must divide by the mesh size, else an error names them before anything
// changes. fully_shard then shards the split tensors over the other dims of the
// same mesh (FSDP x TP; dtr/fsdp/fully_shard.h).
#pragma once

#include "dtr/mesh/device_mesh.h"
#include "dtr/nn/tensor_parallel/parallel_style.h"
#include "dtr/nn/transformer.h"

namespace dtr::nn::tensor_parallel {

struct TransformerPlanOptions {
  bool vocab_parallel_embedding = false;  // the token embedding's rows sharded
  bool loss_parallel = false;             // the output head column-wise: logits sharded by vocabulary
  bool sequence_parallel = false;         // activations between the projections sharded by sequence
  // Mixed precision's reduce dtype for every gradient sum of the plan: the
  // column-wise layers' inputs (whole, or gathered from sequence shards), the
  // sequence-parallel norms' weights and the tied head's input (unset: the
  // compute dtype). The forward sums of activations stay in the compute dtype.
  std::optional<DType> reduce_dtype{};
};

// The plan for a model of this shape (module names as named_modules() gives them).
ParallelizePlan transformer_plan(const TransformerConfig& config, const TransformerPlanOptions& options = {});

// Checks the heads against the mesh (1-D), then parallelize_module(model, mesh,
// transformer_plan(model.config(), options)).
void parallelize_transformer(Transformer& model, const mesh::DeviceMesh& mesh,
                             const TransformerPlanOptions& options = {});

}  // namespace dtr::nn::tensor_parallel
