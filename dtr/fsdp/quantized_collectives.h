// Quantized collectives of one fully_shard group (ZeRO++'s qwZ and qgZ;
// QuantizedCommPolicy in dtr/fsdp/fully_shard.h). The shard dim's ranks are taken
// as `hosts` hosts of k consecutive ranks: what crosses between hosts is block-
// quantized (dtr/tensor/ops/quantize.h), what stays within a host is exact. Each
// collective's work is its exchange between hosts, the slow link, so that it
// overlaps compute; its second stage runs at PendingCollective::wait(). A per-rank
// buffer is quantized parameter by parameter (blocks restart at each parameter's
// segment), so that no block's scale mixes two parameters' magnitudes.
//
//   all-gather (qwZ)      this rank's per-rank buffer (FlatCollectives) becomes
//                         int8 codes all-gathered over `across`, the ranks with
//                         this rank's index on every host. At wait they are
//                         dequantized (this rank's own buffer stays exact) and the
//                         [hosts x numel] result is all-gathered within the host
//                         exactly. Rank r's values so arrive exact on r's host and
//                         quantized once on the others.
//   reduce-scatter (qgZ)  the gradients, laid out by host, are reduce-scattered
//                         exactly within the host (waited for: a fast link). That
//                         leaves this rank its host's partial sums of the per-rank
//                         buffers of its counterparts on every host; they go to
//                         those counterparts as int8 or int4 codes (one all-to-all
//                         over `across`). At wait the hosts' partial sums of this
//                         rank's buffer, its own host's exact, are summed in f32
//                         in host order. With error feedback, each partial sum
//                         sent carries what the codes of the earlier steps left
//                         out of it (kept in f32 by the sender), so that no part
//                         of a gradient is lost for good, only delayed: without it
//                         int4 codes round most small components to zero.
#pragma once

#include "dtr/fsdp/flat_collectives.h"
#include "dtr/fsdp/fully_shard.h"
#include "dtr/mesh/device_mesh.h"
#include "dtr/mesh/process_group.h"
#include "dtr/mesh/reduce_op.h"

#include <cstdint>
#include <string>

namespace dtr::fsdp {

// The shard dim split into hosts of consecutive ranks.
struct HostGroups {
  int64_t hosts = 1;              // 1: one host, nothing to quantize
  int64_t host_size = 1;          // shard ranks per host
  mesh::ProcessGroupPtr within;   // this rank's host
  mesh::ProcessGroupPtr across;   // this rank's index on every host, in host order
};

// The groups a policy asks for: collective over the mesh's shard dim. host_size 0
// takes the hosts the job runs on (reshard_to_host_size); otherwise it must divide
// the dim's size (an error names `what`). hosts = 1 without groups when the policy
// quantizes nothing.
HostGroups make_host_groups(const QuantizedCommPolicy& policy, const mesh::DeviceMesh& mesh, const std::string& what);

// qwZ: the all-gather of this rank's shards, cast to options.dtype (f32 or bf16),
// with int8 codes in blocks of `block` between hosts. Its output is laid out by host.
PendingCollective quantized_all_gather(const FlatCollectives& flat, const HostGroups& hosts,
                                       const TensorOptions& options, int64_t block);

// qgZ: the reduce-scatter of the unsharded gradients (released from their
// parameters) in options.dtype (f32 or bf16) with `op` (sum, avg or premul_sum), the
// hosts' partial sums exchanged as `bits`-bit codes in blocks of `block`.
// `residual` (f32, [hosts x numel], zeros at first; undefined: no error feedback)
// holds what the codes sent to each host have left out so far; it is updated.
PendingCollective quantized_reduce_scatter(const FlatCollectives& flat, const HostGroups& hosts, mesh::ReduceOp op,
                                           const TensorOptions& options, int64_t block, int bits,
                                           const Tensor& residual);

}  // namespace dtr::fsdp
