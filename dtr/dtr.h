// dtr's common API in one include: tensors and their ops, autograd, memory
// statistics and tags, the step profiler, modules, optimizers, the process mesh
// (with the collective checks and timeout),
// DTensor, fully_shard with its wrap policies, model summary and memory
// estimator, checkpoints (sharded, full state dicts, safetensors) and Hugging Face
// weights. Everything else is included by its own path, <dtr/<layer>/...>.
#pragma once

#include "dtr/base/error.h"
#include "dtr/base/log.h"

#include "dtr/tensor/allocator.h"
#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/device.h"
#include "dtr/tensor/dtype.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/memory_stats.h"
#include "dtr/tensor/ops/attention.h"
#include "dtr/tensor/ops/dropout.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/matmul.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/ops/reduce.h"
#include "dtr/tensor/ops/shape_ops.h"
#include "dtr/tensor/ops/softmax.h"
#include "dtr/tensor/profiler.h"
#include "dtr/tensor/random.h"
#include "dtr/tensor/tensor.h"

#include "dtr/mesh/debug_collectives.h"
#include "dtr/mesh/device_mesh.h"
#include "dtr/mesh/distributed.h"
#include "dtr/mesh/process_group.h"
#include "dtr/mesh/watchdog.h"

#include "dtr/dtensor/dtensor.h"
#include "dtr/dtensor/placement.h"

#include "dtr/nn/activation_checkpoint.h"
#include "dtr/nn/container.h"
#include "dtr/nn/init.h"
#include "dtr/nn/layers.h"
#include "dtr/nn/linear.h"
#include "dtr/nn/module.h"
#include "dtr/nn/optim/adam.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/optim/clip_grad.h"
#include "dtr/nn/optim/lr_schedule.h"
#include "dtr/nn/optim/sgd.h"
#include "dtr/nn/optim/weight_decay_groups.h"
#include "dtr/nn/tensor_parallel/loss_parallel.h"
#include "dtr/nn/tensor_parallel/parallelize_module.h"
#include "dtr/nn/tensor_parallel/transformer_plan.h"
#include "dtr/nn/transformer.h"
#include "dtr/nn/transformer_memory.h"

#include "dtr/fsdp/fully_shard.h"
#include "dtr/fsdp/memory_estimate.h"
#include "dtr/fsdp/state_dict.h"
#include "dtr/fsdp/summary.h"
#include "dtr/fsdp/wrap_policy.h"

#include "dtr/checkpoint/async_save.h"
#include "dtr/checkpoint/checkpoint.h"
#include "dtr/checkpoint/full_state_dict.h"
#include "dtr/checkpoint/hf_config.h"
#include "dtr/checkpoint/hf_weights.h"
#include "dtr/checkpoint/model_checkpoint.h"
#include "dtr/checkpoint/safetensors.h"
