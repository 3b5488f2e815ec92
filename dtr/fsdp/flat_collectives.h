// FlatCollectives: the flat buffers of one fully_shard group and the two
// collectives over them. Every parameter owns a segment of padded_rows x row_numel
// elements (ceil(rows / ranks) rows, torch.chunk's split) at a fixed offset in a
// per-rank buffer of numel() elements; a buffer for all ranks lays those per-rank
// buffers out rank by rank. So:
//   all-gather      each rank copies its shards into its per-rank buffer (padding
//                   zeroed) and all_gather_into_tensor fills [ranks x numel];
//                   copy-out moves each parameter's ranks x padded_rows rows into
//                   its padded unsharded buffer;
//   reduce-scatter  the unsharded gradients are copied rank by rank into
//                   [ranks x numel] (zeros for padding and for parameters without
//                   a gradient) and reduce_scatter_tensor leaves this rank's
//                   per-rank buffer, whose segments hold its shards' rows.
// On the CPU, where the shards and gradients are already in the collective's dtype,
// the direct forms skip the flat buffers: one coalesced collective moves each
// parameter's rows between its shard, its padded unsharded buffer and its
// gradient (with MPI one call, over those tensors where they lie). Only a shard
// shorter than its segment, or a gradient whose rows do not divide over the ranks
// (or not contiguous), is copied into a padded buffer of its own; a parameter
// without a gradient reduces a buffer of zeros.
// The quantized collectives (dtr/fsdp/quantized_collectives.h) lay [ranks x numel]
// buffers out by host: with `hosts` hosts of k = ranks / hosts consecutive ranks,
// rank r's per-rank buffer is at position (r % k) * hosts + r / k (its index within
// its host first, then its host), so that the buffers one rank of each host holds
// are adjacent. hosts = 1 is rank order.
// Every copy loop is one copy_batch (dtr/fsdp/copy_batch.h): one launch on CUDA. The
// group (dtr/fsdp/fsdp_param_group.h) decides when these run, in which dtype and on
// which device, and what happens to the results.
#pragma once

#include "dtr/fsdp/copy_batch.h"
#include "dtr/fsdp/fsdp_param.h"
#include "dtr/mesh/process_group.h"
#include "dtr/mesh/reduce_op.h"
#include "dtr/mesh/work.h"
#include "dtr/tensor/tensor.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace dtr::fsdp {

// A collective issued and not yet waited for, with the buffers it reads and writes.
struct PendingCollective {
  mesh::WorkPtr work;
  std::vector<Tensor> inputs;  // what it reads, kept until it completes
  Tensor output;  // undefined when the all-gather wrote the unsharded buffers themselves
  int64_t hosts = 1;  // output's layout by host (above)
  // A second stage that completes `output` once `work` has (a quantized
  // collective's dequantization and its exchange within the host).
  std::function<void()> finish;

  // Waits for the collective and runs its second stage; then `output` may be read.
  void wait();
};

class FlatCollectives {
 public:
  // The layout of `params` (in order) over a shard dim of `ranks` ranks.
  FlatCollectives(const std::vector<std::unique_ptr<FSDPParam>>& params, int64_t ranks);

  int64_t numel() const { return numel_; }  // per rank, padding included
  int64_t ranks() const { return ranks_; }
  // Where parameter i's segment starts in a per-rank buffer, and its length.
  int64_t segment_offset(size_t i) const { return offsets_[i]; }
  int64_t segment_numel(size_t i) const { return params_[i]->padded_numel(); }
  size_t segments() const { return params_.size(); }

  // This rank's shards, cast to options.dtype, into a new per-rank buffer; then the
  // all-gather of every rank's buffer over `group` (the shard dim).
  PendingCollective all_gather(const mesh::ProcessGroupPtr& group, const TensorOptions& options) const;
  // This rank's shards, cast to its dtype, into a per-rank buffer (padding zeroed).
  void copy_shards_into(const Tensor& buffer) const;
  // Whether the direct forms apply: CPU tensors already in `dtype` (the shards, or
  // the unsharded gradients that exist).
  bool can_gather_directly(DType dtype) const;
  bool can_reduce_directly(DType dtype) const;
  // The direct all-gather: every rank's shards straight into the parameters' padded
  // unsharded buffers, which the caller has allocated.
  PendingCollective all_gather_into_unsharded(const mesh::ProcessGroupPtr& group) const;
  // The all-gather of pieces kept after forward (keep_piece) over their group.
  PendingCollective all_gather_piece(const Tensor& piece, const mesh::ProcessGroupPtr& group,
                                     const TensorOptions& options) const;
  // The gathered [ranks x numel] buffer, laid out by `hosts`, into each parameter's
  // padded unsharded buffer.
  void copy_out(const Tensor& gathered, int64_t hosts = 1) const;
  // The per-rank buffers of shard ranks [first, first + count) made from the
  // unsharded parameters: what reshard_after_forward=k keeps.
  Tensor keep_piece(int64_t first, int64_t count, const TensorOptions& options) const;

  // The unsharded gradients (zeros where a parameter has none), cast to
  // options.dtype and laid out rank by rank (directly where can_reduce_directly),
  // reduce-scattered over `group` with `op` into a per-rank buffer. The unsharded
  // gradients are released from their parameters.
  PendingCollective reduce_scatter(const mesh::ProcessGroupPtr& group, mesh::ReduceOp op,
                                   const TensorOptions& options) const;
  // The unsharded gradients (zeros where a parameter has none) cast to
  // options.dtype in a new [ranks x numel] buffer laid out by `hosts`; they are
  // released from their parameters.
  Tensor gradients_by_rank(const TensorOptions& options, int64_t hosts = 1) const;
  // Parameter i's rows in a per-rank buffer, shaped like its shard.
  Tensor shard_rows(const Tensor& flat, size_t i) const;

 private:
  // Jobs laying parameter i's full tensor `full` (undefined: zeros) out as its
  // segments in the per-rank buffers of shard ranks [first, first + count), which
  // `flat` holds back to back (laid out by `hosts` when they are all the ranks);
  // padding is zeroed, so every element is written once.
  void append_rank_segments(std::vector<CopyJob>& jobs, const Tensor& flat, size_t i, const Tensor& full,
                            int64_t first, int64_t count, int64_t hosts = 1) const;
  // Where rank r's per-rank buffer lies in a [ranks x numel] buffer laid out by `hosts`.
  int64_t position(int64_t r, int64_t hosts) const;

  // The direct reduce-scatter: each gradient (padded where its rows do not divide)
  // straight into its segment of the output.
  PendingCollective reduce_scatter_directly(const mesh::ProcessGroupPtr& group, mesh::ReduceOp op,
                                            const TensorOptions& options) const;

  const std::vector<std::unique_ptr<FSDPParam>>& params_;
  std::vector<int64_t> offsets_;  // of each parameter's segment in a per-rank buffer
  int64_t numel_ = 0;
  int64_t ranks_ = 1;
};

}  // namespace dtr::fsdp
