// A printable summary of a (sharded) model, to check the wrapping (the C++
// counterpart of print(model) after fully_shard): the module tree with each
// module's type, parameter count and bytes (global, unsharded sizes; tied
// parameters counted once), and for every module fully_shard was applied to its
// group: number of parameter tensors, this rank's shard (padded flat size, the
// elements it really holds, padding), the mesh (and the tensors tensor
// parallelism split first, over which dims), the mixed precision policy, the
// reshard-after-forward setting and the explicit prefetch lists. Reads only: no
// collective, no allocation of tensor memory.
//
//   std::cout << fsdp::summarize(*model).to_string();
//
// One line per module, indented two spaces per level:
//   layers.0 (TransformerBlock): 4128 params, 16512 B [FSDP group]
// and under each group a line
//   group: 9 tensors, shard_numel_padded=2080 (8320 B f32) holds=2064 padding=16 on rank 0 of 2, ...
#pragma once

#include "dtr/nn/module.h"
#include "dtr/tensor/dtype.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtr::fsdp {

struct GroupSummary {
  int64_t num_tensors = 0;
  int64_t shard_numel_padded = 0;  // this rank's flat all-gather input (FSDPModule::shard_numel_padded)
  int64_t shard_numel = 0;         // elements of its parameters this rank really holds
  int64_t padding = 0;             // shard_numel_padded - shard_numel
  int64_t shard_bytes = 0;         // shard_numel_padded * compute dtype size (the all-gather input)
  DType shard_dtype = DType::f32;     // of the shards (and the optimizer state)
  DType compute_dtype = DType::f32;   // of the all-gather and compute (mp param_dtype)
  int64_t shard_rank = 0, shard_ranks = 1;  // this rank's place in the shard dim of the mesh
  std::string mesh;
  // Of num_tensors, those a tensor-parallel plan split before FSDP sharded them,
  // and the mesh dims it split them over ("(tp=2)").
  int64_t num_tensor_parallel = 0;
  std::string tensor_parallel_mesh;
  std::string mp_policy;              // "param=bf16 reduce=f32 output=- cast_inputs=1"
  std::string reshard_after_forward;  // "true", "false", "2", "default(true)", "default(false, root)"
  std::string quantized_comm;         // "" (off), or "weights=int8 grads=int4 host_size=hosts"
  std::string forward_prefetch;       // "implicit" or "[layers.1, ...]"
  std::string backward_prefetch;
};

struct ModuleSummaryRow {
  std::string path;  // "" for the root
  std::string type;
  int depth = 0;
  int64_t num_params = 0;  // global elements of the subtree's parameters
  int64_t bytes = 0;       // in the parameters' (shard) dtype
  std::optional<GroupSummary> group;
};

struct ModelSummary {
  std::vector<ModuleSummaryRow> rows;  // parents before children
  int64_t total_params = 0;
  int64_t num_groups = 0;
  std::string to_string() const;
};

ModelSummary summarize(nn::Module& root);

}  // namespace dtr::fsdp
