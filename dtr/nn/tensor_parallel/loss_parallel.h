// Loss parallelism: the cross-entropy of logits whose vocabulary is sharded
// over a tensor-parallel mesh, computed without gathering them (PyTorch's
// loss_parallel, Megatron's vocab-parallel cross-entropy). With the output head
// ColwiseParallel, each rank holds [N, V/tp] logits; the full [N, V] logits of
// a large vocabulary are never formed on one rank.
//
//   Tensor logits = model(tokens);   // [B, T, V/tp]: this rank's vocabulary slice
//   Tensor loss = tp::vocab_parallel_cross_entropy(logits.reshape({-1, logits.size(-1)}),
//                                                  targets.reshape({-1}), mesh, vocab_size);
//
// Three all-reduces of N values each (the row maxima, the sums of exponentials,
// the target logits) give every rank the mean loss; backward is local (softmax
// minus the one-hot of the targets in this rank's slice).
#pragma once

#include "dtr/mesh/device_mesh.h"
#include "dtr/tensor/tensor.h"

namespace dtr::nn::tensor_parallel {

// `local_logits` [N, V_r] (a floating dtype): the vocabulary entries
// shard_range(vocab_size, mesh size, rank) of each row; `targets` [N] (i64)
// global vocabulary ids. Returns the mean over the rows whose target is not
// ignore_index (a 0-d tensor, the same on every rank of the 1-D `mesh`),
// differentiable with respect to local_logits. Every other target must be in
// [0, vocab_size).
Tensor vocab_parallel_cross_entropy(const Tensor& local_logits, const Tensor& targets, const mesh::DeviceMesh& mesh,
                                    int64_t vocab_size, int64_t ignore_index = -100);

}  // namespace dtr::nn::tensor_parallel
