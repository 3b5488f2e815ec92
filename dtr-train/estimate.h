// dtr-train --estimate-only: the per-rank memory a training job of this
// configuration would need (dtr/fsdp/memory_estimate.h), printed without building
// the model anywhere but on the meta device, so any shape (a 7B model on a
// laptop) can be planned. The world size is the job's, or --world-size N.
//
// The report: the model shape; the estimate of the configured job (FULL_SHARD,
// or SHARD_GRAD_OP with --reshard-after-forward false; bf16 compute with
// --mixed-precision bf16; --micro-batch sequences of --seq-len tokens per rank;
// --activation-checkpointing) for rank 0, which holds the most when rows split
// unevenly; the table of every strategy with and without activation
// checkpointing; and the tensor bytes this process allocated meanwhile (0: no
// parameter was materialised). With --tp the parameters are those of rank 0 of
// the first tensor-parallel group (the plan's splits, with --sequence-parallel
// and --loss-parallel), sharded over the world size / --tp data-parallel ranks,
// and the activations those of a split block.
#pragma once

#include "config.h"

#include <string>

namespace dtr::train {

// The report text (throws std::invalid_argument / std::runtime_error for a bad model or data file).
std::string estimate_report(const TrainConfig& config);

// Prints the report on rank 0; returns the exit code (0, or 2 for a bad model or data file).
int run_estimate(const TrainConfig& config, int rank);

}  // namespace dtr::train
