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

namespace {

// Jobs filling the flat `dest` with `src`'s elements (none when undefined), cast to
// its dtype, then zeros.
void append_padded(std::vector<CopyJob>& jobs, const Tensor& dest, const Tensor& src) {
  const int64_t used = src.defined() ? src.numel() : 0;
  if (used > 0) jobs.push_back({dest.narrow(0, 0, used), src.reshape({used})});
  if (used < dest.numel()) jobs.push_back({dest.narrow(0, used, dest.numel() - used), Tensor()});
}

}  // namespace

void PendingCollective::wait() {
  work->wait();
  if (finish) {
    auto second_stage = std::move(finish);
    finish = nullptr;
    second_stage();
  }
}

int64_t FlatCollectives::position(int64_t r, int64_t hosts) const {
  const int64_t k = ranks_ / hosts;
  return (r % k) * hosts + r / k;
}

void FlatCollectives::append_rank_segments(std::vector<CopyJob>& jobs, const Tensor& flat, size_t i, const Tensor& full,
                                           int64_t first, int64_t count, int64_t hosts) const {
  const FSDPParam& p = *params_[i];
  const int64_t rows = p.unsharded_shape()[0];
  const Tensor full_rows = full.defined() ? full.reshape({rows, p.row_numel()}) : Tensor();
  for (int64_t r = first; r < first + count; ++r) {
    const int64_t at = hosts == 1 ? r - first : position(r, hosts);
    Tensor segment = flat.narrow(0, at * numel_ + offsets_[i], p.padded_numel());
    if (!full.defined()) {
      append_padded(jobs, segment, Tensor());
      continue;
    }
    const ShardRange range = shard_range(rows, ranks_, r);
    append_padded(jobs, segment, full_rows.narrow(0, range.offset, range.length));
  }
}

namespace {

bool on_cpu_in(const Tensor& t, DType dtype) { return t.dtype() == dtype && t.device().is_cpu(); }

// `t`'s elements, then zeros up to `numel`: the same tensor, flat, when it fills them.
Tensor padded_flat(const Tensor& t, int64_t numel, std::vector<CopyJob>& copies) {
  if (t.numel() == numel && t.is_contiguous()) return t.reshape({numel});
  Tensor padded = dtr::empty({numel}, {.dtype = t.dtype(), .device = t.device(), .tag = MemoryTag::comm_buffer});
  append_padded(copies, padded, t);
  return padded;
}

}  // namespace

bool FlatCollectives::can_gather_directly(DType dtype) const {
  return std::all_of(params_.begin(), params_.end(), [&](const auto& p) { return on_cpu_in(p->sharded(), dtype); });
}

bool FlatCollectives::can_reduce_directly(DType dtype) const {
  return std::all_of(params_.begin(), params_.end(), [&](const auto& p) {
    const Tensor& unsharded = p->unsharded();
    return unsharded.defined() && on_cpu_in(unsharded, dtype) &&
           (!unsharded.grad().defined() || on_cpu_in(unsharded.grad(), dtype));
  });
}

PendingCollective FlatCollectives::all_gather_into_unsharded(const mesh::ProcessGroupPtr& group) const {
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> outs, ins;
  std::vector<CopyJob> padding;
  for (const auto& p : params_) {
    outs.push_back(p->unsharded_padded().view({ranks_ * p->padded_numel()}));
    ins.push_back(padded_flat(p->sharded().detach(), p->padded_numel(), padding));
  }
  if (!padding.empty()) {
    DTR_PROFILE_SCOPE("fsdp", "all_gather padding");
    copy_batch(padding);
  }
  return {group->all_gather_into_tensor_coalesced(outs, ins), std::move(ins), Tensor()};
}

void FlatCollectives::copy_shards_into(const Tensor& buffer) const {
  autograd::NoGradGuard no_grad;
  DTR_PROFILE_SCOPE("fsdp", "all_gather copy_in");
  std::vector<CopyJob> copy_in;  // shards cast to the buffer's dtype, padding zeroed
  for (size_t i = 0; i < params_.size(); ++i) {
    append_padded(copy_in, buffer.narrow(0, offsets_[i], params_[i]->padded_numel()), params_[i]->sharded().detach());
  }
  copy_batch(copy_in);
}

PendingCollective FlatCollectives::all_gather(const mesh::ProcessGroupPtr& group, const TensorOptions& options) const {
  autograd::NoGradGuard no_grad;
  Tensor input = dtr::empty({numel_}, options);
  copy_shards_into(input);
  Tensor output = dtr::empty({ranks_ * numel_}, options);
  return {group->all_gather_into_tensor(output, input), {input}, output};
}

PendingCollective FlatCollectives::all_gather_piece(const Tensor& piece, const mesh::ProcessGroupPtr& group,
                                                    const TensorOptions& options) const {
  Tensor output = dtr::empty({ranks_ * numel_}, options);
  return {group->all_gather_into_tensor(output, piece), {piece}, output};
}

void FlatCollectives::copy_out(const Tensor& gathered_flat, int64_t hosts) const {
  DTR_PROFILE_SCOPE("fsdp", "all_gather copy_out");
  autograd::NoGradGuard no_grad;
  // [k, hosts, numel]: rank (host b, local j) at [j, b], so [b, j] after the transpose.
  const int64_t k = ranks_ / hosts;
  Tensor gathered = gathered_flat.view({k, hosts, numel_});
  std::vector<CopyJob> copy_out;  // each parameter's row blocks, one per rank
  for (size_t i = 0; i < params_.size(); ++i) {
    const FSDPParam& p = *params_[i];
    Tensor src = gathered.narrow(2, offsets_[i], p.padded_numel())
                     .view({k, hosts, p.padded_rows(), p.row_numel()})
                     .transpose(0, 1);
    copy_out.push_back({p.unsharded_padded().view({hosts, k, p.padded_rows(), p.row_numel()}), src});
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
  if (options.device.is_cpu() && can_reduce_directly(options.dtype)) return reduce_scatter_directly(group, op, options);
  Tensor input = gradients_by_rank(options);
  Tensor output = dtr::empty({numel_}, options);
  return {group->reduce_scatter_tensor(output, input, op), {input}, output};
}

Tensor FlatCollectives::gradients_by_rank(const TensorOptions& options, int64_t hosts) const {
  autograd::NoGradGuard no_grad;
  DTR_PROFILE_SCOPE("fsdp", "reduce_scatter copy_in");
  Tensor input = dtr::empty({ranks_ * numel_}, options);
  std::vector<CopyJob> copy_in;  // zeros for the parameters that got no gradient: their rows still reduce
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& unsharded = params_[i]->unsharded();
    const Tensor grad = unsharded.defined() ? unsharded.grad() : Tensor();
    append_rank_segments(copy_in, input, i, grad, 0, ranks_, hosts);
    if (grad.defined()) unsharded.set_grad({});  // copy_in keeps its memory until the copies are issued
  }
  copy_batch(copy_in);
  return input;
}

PendingCollective FlatCollectives::reduce_scatter_directly(const mesh::ProcessGroupPtr& group, mesh::ReduceOp op,
                                                           const TensorOptions& options) const {
  std::vector<Tensor> outs, ins;
  std::vector<CopyJob> padding;  // zeros for the parameters that got no gradient: their rows still reduce
  Tensor output = dtr::empty({numel_}, options);
  for (size_t i = 0; i < params_.size(); ++i) {
    const FSDPParam& p = *params_[i];
    const Tensor& unsharded = p.unsharded();
    const Tensor grad = unsharded.grad().defined() ? unsharded.grad() : dtr::empty({0}, options);
    outs.push_back(output.narrow(0, offsets_[i], p.padded_numel()));
    ins.push_back(padded_flat(grad, ranks_ * p.padded_numel(), padding));
    if (unsharded.grad().defined()) unsharded.set_grad({});  // `ins` keeps it until the collective completes
  }
  if (!padding.empty()) {
    DTR_PROFILE_SCOPE("fsdp", "reduce_scatter padding");
    copy_batch(padding);
  }
  return {group->reduce_scatter_tensor_coalesced(outs, ins, op), std::move(ins), output};
}

Tensor FlatCollectives::shard_rows(const Tensor& flat, size_t i) const {
  const FSDPParam& p = *params_[i];
  return flat.narrow(0, offsets_[i], p.local_rows() * p.row_numel()).view(p.sharded().sizes());
}

}  // namespace dtr::fsdp
