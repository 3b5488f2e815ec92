// The activation memory of nn::Transformer: the bytes alive at the peak of one
// training step's forward + backward, counted tensor by tensor from
// dtr/nn/transformer.cpp and the ops' saved tensors, without building the model.
// The FSDP memory estimator takes it as its activation model:
//
//   auto e = fsdp::estimate_memory(meta_model, fsdp::module_type_policy<nn::TransformerBlock>(), 8,
//                                  {.batch_size = 4, .seq_len = 2048},
//                                  std::bind_front(nn::estimate_activation_bytes, config));
//
// Measured at world sizes 1-4 on the tests' llama configs (f32 and bf16, with and
// without activation checkpointing) it is within a few bytes, as for the GPT-2
// style's small config (whose coefficients were fitted with H = 4 x dim only).
// Not counted: parameter-gradient temporaries (not at the peak), dropout masks
// (dropout > 0), the token ids made before the step, the loss scalar.
#pragma once

#include "dtr/nn/tensor_parallel/transformer_plan.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/dtype.h"

#include <cstdint>
#include <optional>

namespace dtr::nn {

// Bytes at the peak of forward + backward of `batch_size` sequences of `seq_len`
// tokens (0: config.max_seq_len), computing in `compute_dtype` (mixed precision's
// param_dtype; none: config.dtype), with every TransformerBlock checkpointed or not.
int64_t estimate_activation_bytes(const TransformerConfig& config, int64_t batch_size, int64_t seq_len,
                                  std::optional<DType> compute_dtype, bool activation_checkpointing);

// The same on one rank of `tp_ranks` that tensor_parallel::parallelize_transformer
// split the model over with `plan`: each rank keeps its heads and its slice of
// the hidden features, the whole activations between the projections (or its
// share of the sequence with sequence parallelism) and its slice of the logits
// with loss parallelism, whose loss (vocab_parallel_cross_entropy) keeps two
// such slices. The loss is computed on the logits in their dtype.
int64_t estimate_tensor_parallel_activation_bytes(const TransformerConfig& config, int64_t tp_ranks,
                                                  const tensor_parallel::TransformerPlanOptions& plan,
                                                  int64_t batch_size, int64_t seq_len,
                                                  std::optional<DType> compute_dtype, bool activation_checkpointing);

}  // namespace dtr::nn
