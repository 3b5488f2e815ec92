// The dtr-train job: data, a fully_shard-ed transformer, AdamW with an LR
// schedule and gradient clipping, evaluation, metrics and the final sample.
// run_training (trainer.cpp) is its phases in order: set-up, the model, its
// first parameters (fresh or --init-from), the optimizer, --resume, the reports,
// the training loop (training_loop.h), the end; the state they share is a Run
// (run_state.h).
//
// Flow on every rank (all collective calls happen at the same points on every rank):
//   1. local setup (dataset, train/validation split, sampler, model shape); any
//      error there is agreed on by all ranks (one all-reduce) and ends the job with
//      exit code 2 and one line on rank 0;
//   2. the model is built on meta, optionally wrapped for activation checkpointing
//      (per TransformerBlock), fully_shard-ed per block and at the root (with the
//      bf16 mixed-precision policy when asked), materialised and initialised;
//   3. each step: the sampler gives this rank its slice of the global batch, split
//      into grad_accum micro-batches (gradient sync only on the last one), then
//      clip_grad_norm_ (global norm over the shards) and an AdamW step;
//   4. rank 0 appends to metrics.jsonl every step, prints a progress line every
//      log_every steps (peak memory by tag gathered from every rank), a progress
//      bar in between when the output ends on a terminal (terminal.h; under
//      mpirun, when mpirun's stdout is one), rewrites loss.svg after each
//      evaluation, and writes config.json at the start;
//   5. checkpoints (train_checkpoint.h) in <out>/checkpoints/step_<N>: every
//      --ckpt-every steps, at the end (unless --no-final-checkpoint), and when a
//      stop signal arrives (stop_signal.h: SIGINT, SIGTERM, SIGUSR1 on any rank;
//      the ranks agree in the step's loss all-reduce, save after that step, rank 0
//      prints one "stopped by ..." line, and run_training returns 0 without the
//      sample; the caller holds the StopSignalScope, as dtr-train's main does
//      first thing); --resume loads one at any world size;
//   6. at the end every rank runs the same generation steps and rank 0 prints the sample.
#pragma once

#include "config.h"

namespace dtr::train {

// Returns the process exit code: 0 (finished, nothing left to train, or stopped by
// a signal after saving a checkpoint), 1 (a non-finite step with --on-nonfinite
// stop, a checkpoint refused for non-finite parameters, or --export-hf failed), or
// 2 for bad input found during setup.
int run_training(TrainConfig config);

}  // namespace dtr::train
