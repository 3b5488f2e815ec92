#include "dtr/fsdp/flat_collectives.h"

#include "dtr/fsdp/copy_batch.h"

#include "dtr/dtensor/dtensor_spec.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/profiler.h"

#include <algorithm>

namespace dtr::fsdp {

FlatCollectives::FlatCollectives(const std::vector<std::unique_ptr<FSDPParam>>& params, int64_t ranks)
    : params_(params), ranks_(ranks) {
  for (auto& p : params_) {
    offsets_.push_back(numel_);
    numel_ += p->padded_numel();
  }
}

void FlatCollectives::append_rank_segments(std::vector<CopyJob>& jobs, const Tensor& flat, size_t i, const Tensor& full,
                                           int64_t first, int64_t count) const {
  const FSDPParam& p = *params_[i];
  const int64_t rows = p.global_shape()[0];
  const Tensor full_rows = full.defined() ? full.reshape({rows, p.row_numel()}) : Tensor();
  for (int64_t r = first; r < first + count; ++r) {
    Tensor segment = flat.narrow(0, (r - first) * numel_ + offsets_[i], p.padded_numel());
    const ShardRange range = full.defined() ? shard_range(rows, ranks_, r) : ShardRange{};
    const int64_t used = range.length * p.row_numel();
    if (used > 0) jobs.push_back({segment.narrow(0, 0, used), full_rows.narrow(0, range.offset, range.length).reshape({used})});
    if (used < p.padded_numel()) jobs.push_back({segment.narrow(0, used, p.padded_numel() - used), Tensor()});
  }
}

namespace {

// Parameter i's segment of a per-rank buffer, holding its shard's rows.
Tensor shard_segment(const Tensor& buffer, int64_t offset, const FSDPParam& p) {
  return buffer.narrow(0, offset, p.local_rows() * p.row_numel()).view(p.sharded().sizes());
}

bool is_segment(const Tensor& shard, const Tensor& segment) {
  return shard.storage().is_same(segment.storage()) && shard.storage_offset() == segment.storage_offset() &&
         shard.is_contiguous();
}

}  // namespace

bool FlatCollectives::shards_in_buffer() const {
  if (!shard_buffer_.defined()) return false;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!is_segment(params_[i]->sharded(), shard_segment(shard_buffer_, offsets_[i], *params_[i]))) return false;
  }
  return true;
}

void FlatCollectives::keep_shards_in_buffer() {
  // Only where this rank's shards fill their segments: padding in the buffer would
  // make the shards cost more than their elements.
  const bool padded = std::any_of(params_.begin(), params_.end(),
                                  [](const auto& p) { return p->local_rows() != p->padded_rows(); });
  if (params_.empty() || padded) return;
  autograd::NoGradGuard no_grad;
  const Tensor first = params_.front()->sharded();
  if (!shard_buffer_.defined() || shard_buffer_.dtype() != first.dtype() || shard_buffer_.device() != first.device()) {
    // No padding here, so the copies below write every element.
    shard_buffer_ = dtr::empty({numel_}, {.dtype = first.dtype(), .device = first.device(), .tag = MemoryTag::param});
  }
  std::vector<CopyJob> copies;
  std::vector<std::pair<size_t, Tensor>> moved;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor shard = params_[i]->sharded();
    Tensor segment = shard_segment(shard_buffer_, offsets_[i], *params_[i]);
    if (is_segment(shard, segment)) continue;
    DTR_INTERNAL_ASSERT(shard.dtype() == shard_buffer_.dtype() && shard.device() == shard_buffer_.device(),
                        "keep_shards_in_buffer: '{}' is {} on {}, the buffer {} on {}", params_[i]->fqn(),
                        shard.dtype(), shard.device(), shard_buffer_.dtype(), shard_buffer_.device());
    copies.push_back({segment, shard.detach()});
    moved.emplace_back(i, segment);
  }
  if (moved.empty()) return;
  DTR_PROFILE_SCOPE("fsdp", "shards into the all-gather buffer");
  copy_batch(copies);
  for (auto& [i, segment] : moved) params_[i]->replace_shard(segment.detach());
}

PendingCollective FlatCollectives::all_gather(const mesh::ProcessGroupPtr& group, const TensorOptions& options) const {
  autograd::NoGradGuard no_grad;
  if (shard_buffer_.defined() && shard_buffer_.dtype() == options.dtype && shard_buffer_.device() == options.device &&
      shards_in_buffer()) {
    Tensor output = dtr::empty({ranks_ * numel_}, options);
    return {group->all_gather_into_tensor(output, shard_buffer_), shard_buffer_, output};
  }
  Tensor input = dtr::empty({numel_}, options);
  DTR_PROFILE_SCOPE("fsdp", "all_gather copy_in");
  std::vector<CopyJob> copy_in;  // shards cast to the buffer's dtype, padding zeroed
  for (size_t i = 0; i < params_.size(); ++i) {
    const FSDPParam& p = *params_[i];
    Tensor segment = input.narrow(0, offsets_[i], p.padded_numel());
    const int64_t used = p.local_rows() * p.row_numel();
    if (used > 0) copy_in.push_back({segment.narrow(0, 0, used), p.sharded().detach().reshape({used})});
    if (used < p.padded_numel()) copy_in.push_back({segment.narrow(0, used, p.padded_numel() - used), Tensor()});
  }
  copy_batch(copy_in);
  Tensor output = dtr::empty({ranks_ * numel_}, options);
  return {group->all_gather_into_tensor(output, input), input, output};
}

PendingCollective FlatCollectives::all_gather_piece(const Tensor& piece, const mesh::ProcessGroupPtr& group,
                                                    const TensorOptions& options) const {
  Tensor output = dtr::empty({ranks_ * numel_}, options);
  return {group->all_gather_into_tensor(output, piece), piece, output};
}

void FlatCollectives::copy_out(const Tensor& gathered_flat) const {
  DTR_PROFILE_SCOPE("fsdp", "all_gather copy_out");
  autograd::NoGradGuard no_grad;
  Tensor gathered = gathered_flat.view({ranks_, numel_});
  std::vector<CopyJob> copy_out;  // each parameter's row blocks, one per rank
  for (size_t i = 0; i < params_.size(); ++i) {
    const FSDPParam& p = *params_[i];
    Tensor src = gathered.narrow(1, offsets_[i], p.padded_numel()).view({ranks_, p.padded_rows(), p.row_numel()});
    copy_out.push_back({p.unsharded_padded().view({ranks_, p.padded_rows(), p.row_numel()}), src});
  }
  copy_batch(copy_out);
}

Tensor FlatCollectives::keep_piece(int64_t first, int64_t count, const TensorOptions& options) const {
  autograd::NoGradGuard no_grad;
  Tensor piece = dtr::empty({count * numel_}, options);
  std::vector<CopyJob> keep;
  for (size_t i = 0; i < params_.size(); ++i) {
    append_rank_segments(keep, piece, i, params_[i]->unsharded().detach(), first, count);
  }
  copy_batch(keep);
  return piece;
}

PendingCollective FlatCollectives::reduce_scatter(const mesh::ProcessGroupPtr& group, mesh::ReduceOp op,
                                                  const TensorOptions& options) const {
  autograd::NoGradGuard no_grad;
  profiler::Span copy_in_span("fsdp", "reduce_scatter copy_in");
  Tensor input = dtr::empty({ranks_ * numel_}, options);
  {
    std::vector<CopyJob> copy_in;  // zeros for the parameters that got no gradient: their rows still reduce
    for (size_t i = 0; i < params_.size(); ++i) {
      const Tensor& unsharded = params_[i]->unsharded();
      const Tensor grad = unsharded.defined() ? unsharded.grad() : Tensor();
      append_rank_segments(copy_in, input, i, grad, 0, ranks_);
      if (grad.defined()) unsharded.set_grad({});  // copy_in keeps its memory until the copies are issued
    }
    copy_batch(copy_in);
  }
  copy_in_span.end();
  Tensor output = dtr::empty({numel_}, options);
  return {group->reduce_scatter_tensor(output, input, op), input, output};
}

Tensor FlatCollectives::shard_rows(const Tensor& flat, size_t i) const {
  return shard_segment(flat, offsets_[i], *params_[i]);
}

}  // namespace dtr::fsdp
