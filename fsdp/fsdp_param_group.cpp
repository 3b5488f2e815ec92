#include "fsdp/fsdp_param_group.h"

#include "fsdp/copy_batch.h"

#include "base/error.h"
#include "tensor/autograd/grad_mode.h"
#include "tensor/factory.h"
#include "tensor/memory_stats.h"
#include "tensor/ops/elementwise.h"
#include "tensor/profiler.h"

#include <cmath>

#ifdef DTR_WITH_CUDA
#include "tensor/cuda/cuda_copy.h"
#include "tensor/cuda/cuda_runtime.h"
#endif

namespace dtr::fsdp {

FSDPParamGroup::FSDPParamGroup(std::vector<std::unique_ptr<FSDPParam>> params, mesh::DeviceMesh mesh,
                               DType reduce_dtype, bool offload, bool pin_memory)
    : params_(std::move(params)),
      mesh_(std::move(mesh)),
      reduce_dtype_(reduce_dtype),
      offload_(offload),
      pin_memory_(offload && pin_memory) {
  compute_dtype_ = params_.empty() ? reduce_dtype : params_.front()->compute_dtype();
  for (auto& p : params_) {
    DTR_CHECK(p->compute_dtype() == compute_dtype_,
              "fully_shard: the parameters of one group must share a compute dtype for the all-gather: '{}' is {} "
              "but '{}' is {} (set mp_policy.param_dtype, or shard them in separate groups)",
              params_.front()->fqn(), compute_dtype_, p->fqn(), p->compute_dtype());
    p->set_flat_offset(flat_numel_);
    flat_numel_ += p->padded_numel();
  }
}

Device FSDPParamGroup::device() const {
#ifdef DTR_WITH_CUDA
  if (offload_) return Device::cuda(cuda::current_device());
#endif
  return params_.front()->sharded().device();
}

void FSDPParamGroup::issue_all_gather() {
  if (empty() || unsharded_ || all_gather_.work) return;
  autograd::NoGradGuard no_grad;
  const Device dev = device();
  DTR_CHECK(!params_.front()->sharded().device().is_meta(),
            "fully_shard: the parameters of '{}' are on the meta device; call to_empty(device) "
            "and reset_parameters() before the first forward", params_.front()->fqn());
  DTR_CHECK(!offload_ || params_.front()->sharded().device().is_cpu(),
            "fully_shard: with offload_policy the shards of '{}' must live on the CPU, found {} (materialise a "
            "meta model with to_empty(Device::cpu()))", params_.front()->fqn(), params_.front()->sharded().device());
  // Shards replaced since fully_shard (to_empty, a new tensor) are pinned in place,
  // keeping the handles an optimizer holds; a no-op for pinned ones.
  if (copies_host_async()) {
    for (auto& p : params_) p->sharded().storage().pin();
  }
  const int64_t k = shard_size();
  TensorOptions options{.dtype = compute_dtype_, .device = dev, .tag = MemoryTag::comm_buffer};
  if (post_forward_piece_.defined()) {  // after reshard(keep_piece): gather over the k ranks only
    Tensor output = dtr::empty({k * flat_numel_}, options);
    all_gather_ = {post_forward_group_->all_gather_into_tensor(output, post_forward_piece_), post_forward_piece_,
                   output};
    post_forward_piece_ = Tensor();
    return;
  }
  Tensor input = dtr::empty({flat_numel_}, options);
  DTR_PROFILE_SCOPE("fsdp", "all_gather copy_in");
  std::vector<CopyJob> copy_in;  // shards cast to the compute dtype, padding zeroed: one launch on CUDA
  for (auto& p : params_) {
    Tensor segment = input.narrow(0, p->flat_offset(), p->padded_numel());
    const int64_t used = p->local_rows() * p->row_numel();
    if (used > 0) copy_in.push_back({segment.narrow(0, 0, used), p->sharded().detach().reshape({used})});
    if (used < p->padded_numel()) copy_in.push_back({segment.narrow(0, used, p->padded_numel() - used), Tensor()});
  }
  copy_batch(copy_in);
  Tensor output = dtr::empty({k * flat_numel_}, options);
  all_gather_ = {shard_group()->all_gather_into_tensor(output, input), input, output};
}

void FSDPParamGroup::set_post_forward_group(mesh::ProcessGroupPtr group) { post_forward_group_ = std::move(group); }

void FSDPParamGroup::wait_for_unshard() {
  if (empty()) return;
  if (unsharded_) {
    bool stale = false;
    for (size_t i = 0; i < params_.size(); ++i) {
      stale = stale || params_[i]->sharded().storage().version() != gathered_versions_[i];
    }
    if (!stale) return;
    reshard();
  }
  issue_all_gather();
  all_gather_.work->wait();
  DTR_PROFILE_SCOPE("fsdp", "all_gather copy_out");
  autograd::NoGradGuard no_grad;
  const int64_t k = shard_size();
  Tensor gathered = all_gather_.output.view({k, flat_numel_});
  std::vector<CopyJob> copy_out;  // each parameter's k row blocks: one launch on CUDA
  std::vector<uint64_t> versions;
  for (auto& p : params_) {
    p->allocate_unsharded(device());
    versions.push_back(p->unsharded().storage().version());
    Tensor src = gathered.narrow(1, p->flat_offset(), p->padded_numel()).view({k, p->padded_rows(), p->row_numel()});
    copy_out.push_back({p->unsharded_padded().view({k, p->padded_rows(), p->row_numel()}), src});
  }
  copy_batch(copy_out);
  for (size_t i = 0; i < params_.size(); ++i) {
    // Refilling memory autograd saved in forward is not a modification of it.
    params_[i]->unsharded().storage().restore_version(versions[i]);
    params_[i]->install_unsharded();
  }
  all_gather_ = {};
  unsharded_ = true;
  gathered_versions_.clear();
  for (auto& p : params_) gathered_versions_.push_back(p->sharded().storage().version());
}

void FSDPParamGroup::reshard(bool keep_piece) {
  if (all_gather_.work) {  // a prefetch nobody used: finish the collective, drop it
    all_gather_.work->wait();
    all_gather_ = {};
  }
  if (!unsharded_) return;
  if (keep_piece && post_forward_group_) {
    // This rank keeps the flat segments of the ranks of its block of the
    // post-forward group: block j of k covers mesh ranks [j * n / k, (j + 1) * n / k).
    autograd::NoGradGuard no_grad;
    const int64_t n = shard_size(), k = post_forward_group_->size();
    const int64_t per_block = n / k, first = post_forward_group_->rank() * per_block;
    post_forward_piece_ = dtr::zeros({per_block * flat_numel_}, {.dtype = compute_dtype_,
                                                                   .device = device(), .tag = MemoryTag::param});
    std::vector<CopyJob> keep;
    for (auto& p : params_) {
      const int64_t rows = p->global_shape()[0];
      Tensor unsharded_rows = p->unsharded().detach().reshape({rows, p->row_numel()});
      for (int64_t s = first; s < first + per_block; ++s) {
        ShardRange range = shard_range(rows, n, s);
        if (range.length == 0) continue;
        keep.push_back(
            {post_forward_piece_.narrow(0, (s - first) * flat_numel_ + p->flat_offset(), range.length * p->row_numel()),
             unsharded_rows.narrow(0, range.offset, range.length).reshape({range.length * p->row_numel()})});
      }
    }
    copy_batch(keep);
  }
  for (auto& p : params_) {
    p->install_sharded();
    p->release_unsharded();
  }
  unsharded_ = false;
}

void FSDPParamGroup::issue_reduce_scatter(std::optional<double> divide_factor) {
  if (empty()) return;
  DTR_INTERNAL_ASSERT(!reduce_scatter_.work, "a reduce-scatter is already pending");
  autograd::NoGradGuard no_grad;
  const int64_t k = shard_size();
  TensorOptions options{.dtype = reduce_dtype_, .device = device(), .tag = MemoryTag::comm_buffer};
  profiler::Span copy_in_span("fsdp", "reduce_scatter copy_in");
  // Every element is written once: gradient rows, or zeros for padding and for
  // parameters that got no gradient (their reduce-scatter still runs).
  Tensor input = dtr::empty({k * flat_numel_}, options);
  Tensor by_rank = input.view({k, flat_numel_});
  std::vector<CopyJob> copy_in;  // gradient rows cast to the reduce dtype, padding zeroed: one launch on CUDA
  for (auto& p : params_) {
    const Tensor grad = p->unsharded().defined() ? p->unsharded().grad() : Tensor();
    const int64_t rows = p->global_shape()[0];
    Tensor grad_rows = grad.defined() ? grad.reshape({rows, p->row_numel()}) : Tensor();
    for (int64_t r = 0; r < k; ++r) {
      Tensor segment = by_rank.select(0, r).narrow(0, p->flat_offset(), p->padded_numel());
      ShardRange range = grad.defined() ? shard_range(rows, k, r) : ShardRange{};
      const int64_t used = range.length * p->row_numel();
      if (used > 0) copy_in.push_back({segment.narrow(0, 0, used), grad_rows.narrow(0, range.offset, range.length).reshape({used})});
      if (used < p->padded_numel()) copy_in.push_back({segment.narrow(0, used, p->padded_numel() - used), Tensor()});
    }
    if (grad.defined()) p->unsharded().set_grad({});  // copy_in keeps its memory until the copies are issued
  }
  copy_batch(copy_in);
  copy_in_span.end();
  // Dividing by the number of data-parallel ranks (or the user's factor). f16
  // overflows when summing large gradients and underflows when dividing first:
  // split the division around the reduction, like FSDP2.
  const double factor = divide_factor.value_or(static_cast<double>(mesh_.size()));
  mesh::ReduceOp op = mesh::ReduceOp::premul_sum(1.0 / factor);
  post_divide_ = 1.0;
  if (reduce_dtype_ == DType::f16) {
    const double pre = std::sqrt(factor);
    op = mesh::ReduceOp::premul_sum(1.0 / pre);
    post_divide_ = factor / pre;
  } else if (!divide_factor) {
    op = mesh::ReduceOp::avg();
  }
  reduce_op_ = op;
  Tensor output = dtr::empty({flat_numel_}, options);
  reduce_scatter_ = {shard_group()->reduce_scatter_tensor(output, input, op), input, output};
}

void FSDPParamGroup::wait_for_reduce_scatter() {
  if (!reduce_scatter_.work) return;
  reduce_scatter_.work->wait();
  autograd::NoGradGuard no_grad;
  Tensor reduced = reduce_scatter_.output;
  if (mesh_.ndim() == 2) {
    // HSDP: the shard group averaged (or scaled) its part; the replicas combine theirs.
    if (partial_reduce_.defined()) reduced = add(reduced, partial_reduce_);
    if (requires_all_reduce_) {
      partial_reduce_ = Tensor();
      const bool average = reduce_op_.kind == mesh::ReduceOp::Kind::avg;
      mesh_.group(0)->all_reduce(reduced, average ? mesh::ReduceOp::avg() : mesh::ReduceOp::sum())->wait();
    } else {
      partial_reduce_ = reduced;
      reduce_scatter_ = {};
      return;
    }
  }
  MemoryTagGuard tag(MemoryTag::grad);
  DTR_PROFILE_SCOPE("fsdp", "reduce_scatter copy_out");
  if (copies_host_async()) {
    copy_out_pinned(reduced);
    reduce_scatter_ = {};
    return;
  }
  // Each shard's rows of the reduced buffer, cast to the shard's dtype, into a new
  // tensor (one launch on CUDA), then scaled and accumulated per parameter.
  std::vector<CopyJob> copy_out;
  std::vector<Tensor> locals(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor shard = params_[i]->sharded();
    if (!shard.requires_grad()) continue;
    locals[i] = dtr::empty(shard.sizes(), {.dtype = shard.dtype(), .device = shard.device()});
    copy_out.push_back({locals[i], reduced.narrow(0, params_[i]->flat_offset(),
                                                  params_[i]->local_rows() * params_[i]->row_numel())
                                       .view(shard.sizes())});
  }
  copy_batch(copy_out);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!locals[i].defined()) continue;
    Tensor shard = params_[i]->sharded();
    if (post_divide_ != 1.0) mul_(locals[i], Scalar(1.0 / post_divide_));
    shard.set_grad(shard.grad().defined() ? add(shard.grad(), locals[i]) : locals[i]);
  }
  reduce_scatter_ = {};
}

// Each shard's rows of the reduced buffer, cast to the shard's dtype (one launch)
// and scaled on the device: the values the pageable path computes on the host.
// They go into a new pinned .grad without waiting. Accumulating into an existing
// .grad sums on the host, so that copy waits (after any earlier copy into .grad).
// The device buffers are freed on the stream the copies are queued on, so they
// are not reused before the copies read them.
void FSDPParamGroup::copy_out_pinned(const Tensor& reduced) {
#ifdef DTR_WITH_CUDA
  std::vector<CopyJob> casts;
  std::vector<Tensor> rows(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor shard = params_[i]->sharded();
    if (!shard.requires_grad()) continue;
    rows[i] = reduced.narrow(0, params_[i]->flat_offset(), params_[i]->local_rows() * params_[i]->row_numel())
                  .view(shard.sizes());
    if (rows[i].dtype() != shard.dtype()) {
      Tensor cast = dtr::empty(shard.sizes(), {.dtype = shard.dtype(), .device = reduced.device()});
      casts.push_back({cast, rows[i]});
      rows[i] = cast;
    }
  }
  copy_batch(casts);
  bool waited = false;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!rows[i].defined()) continue;
    if (post_divide_ != 1.0) mul_(rows[i], Scalar(1.0 / post_divide_));
    Tensor shard = params_[i]->sharded();
    Tensor grad = dtr::empty(shard.sizes(), {.dtype = shard.dtype(), .pin_memory = true});
    if (shard.grad().defined()) {
      if (!waited) wait_for_host_copies();
      waited = true;
      grad.copy_(rows[i]);
      add_(grad, shard.grad());
    } else {
      cuda::copy_to_host_async(grad, rows[i]);
    }
    shard.set_grad(grad);
  }
#else
  (void)reduced;
  DTR_INTERNAL_ASSERT(false, "pinned CPU offload without the CUDA backend");
#endif
}

void FSDPParamGroup::wait_for_host_copies() {
#ifdef DTR_WITH_CUDA
  if (copies_host_async()) cuda::synchronize(cuda::current_device());
#endif
}

}  // namespace dtr::fsdp
