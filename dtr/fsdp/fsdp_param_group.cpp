#include "dtr/fsdp/fsdp_param_group.h"

#include "dtr/fsdp/copy_batch.h"

#include "dtr/base/error.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/memory_stats.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/profiler.h"

#include <algorithm>
#include <cmath>

#ifdef DTR_WITH_CUDA
#include "dtr/tensor/cuda/cuda_copy.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

namespace dtr::fsdp {

FSDPParamGroup::FSDPParamGroup(std::vector<std::unique_ptr<FSDPParam>> params, mesh::DeviceMesh mesh,
                               GroupPlacement placement, DType reduce_dtype, QuantizedCommPolicy quantized,
                               HostGroups hosts)
    : params_(std::move(params)),
      mesh_(std::move(mesh)),
      collectives_(params_, mesh_.size(mesh_.ndim() - 1)),
      placement_(placement),
      reduce_dtype_(reduce_dtype),
      quantized_(quantized),
      hosts_(std::move(hosts)) {
  compute_dtype_ = params_.empty() ? reduce_dtype : params_.front()->compute_dtype();
  for (auto& p : params_) {
    DTR_CHECK(p->compute_dtype() == compute_dtype_,
              "fully_shard: the parameters of one group must share a compute dtype for the all-gather: '{}' is {} "
              "but '{}' is {} (set mp_policy.param_dtype, or shard them in separate groups)",
              params_.front()->fqn(), compute_dtype_, p->fqn(), p->compute_dtype());
  }
  const auto quantizable = [](DType d) { return d == DType::f32 || d == DType::bf16; };
  DTR_CHECK(!quantizes_weights() || empty() || quantizable(compute_dtype_),
            "fully_shard: quantized_comm.weights quantizes the all-gather of f32 or bf16 values, but '{}' computes in "
            "{} (set mp_policy.param_dtype)", params_.front()->fqn(), compute_dtype_);
  DTR_CHECK(!quantizes_gradients() || empty() || quantizable(reduce_dtype_),
            "fully_shard: quantized_comm.gradient_bits quantizes gradients reduced in f32 or bf16, but the group of "
            "'{}' reduces in {} (set mp_policy.reduce_dtype)", params_.front()->fqn(), reduce_dtype_);
}

Device FSDPParamGroup::device() const {
#ifdef DTR_WITH_CUDA
  if (placement_.offload) return Device::cuda(cuda::current_device());
#endif
  return params_.front()->sharded().device();
}

bool FSDPParamGroup::can_compute_on_shards() const {
  if (mesh_.size() != 1 || placement_.offload || reduce_dtype_ != compute_dtype_) return false;
  return std::all_of(params_.begin(), params_.end(), [&](const auto& p) {
    const Tensor shard = p->sharded();
    return shard.dtype() == compute_dtype_ && !shard.device().is_meta();
  });
}

void FSDPParamGroup::issue_all_gather() {
  if (empty() || unsharded_ || all_gather_.work || can_compute_on_shards()) return;
  autograd::NoGradGuard no_grad;
  const Device dev = device();
  DTR_CHECK(!params_.front()->sharded().device().is_meta(),
            "fully_shard: the parameters of '{}' are on the meta device; call to_empty(device) "
            "and reset_parameters() before the first forward", params_.front()->fqn());
  DTR_CHECK(!placement_.offload || params_.front()->sharded().device().is_cpu(),
            "fully_shard: with offload_policy the shards of '{}' must live on the CPU, found {} (materialise a "
            "meta model with to_empty(Device::cpu()))", params_.front()->fqn(), params_.front()->sharded().device());
  // Shards replaced since fully_shard (to_empty, a new tensor) are pinned in place,
  // keeping the handles an optimizer holds; a no-op for pinned ones.
  if (copies_host_async()) {
    for (auto& p : params_) p->sharded().storage().pin();
  }
  issued_versions_ = shard_versions();
  TensorOptions options{.dtype = compute_dtype_, .device = dev, .tag = MemoryTag::comm_buffer};
  if (post_forward_piece_.defined()) {  // after reshard(keep_piece_for): gather over those ranks only
    all_gather_ = collectives_.all_gather_piece(post_forward_piece_, post_forward_group_, options);
    drop_post_forward_piece();
    return;
  }
  if (quantizes_weights()) {
    all_gather_ = quantized_all_gather(collectives_, hosts_, options, quantized_.block_size);
    return;
  }
  // On the CPU the shards go straight into the unsharded buffers, allocated now and
  // counted as communication buffers until the wait, as the flat buffer they stand
  // in for would be. (On CUDA the flat buffer's copy-in also orders the read after
  // the optimizer's writes on the compute stream; it stays.)
  if (dev.is_cpu() && !placement_.offload && collectives_.can_gather_directly(compute_dtype_)) {
    for (auto& p : params_) p->allocate_unsharded(dev, MemoryTag::comm_buffer);
    try {
      all_gather_ = collectives_.all_gather_into_unsharded(shard_group());
    } catch (...) {
      for (auto& p : params_) p->release_unsharded();
      throw;
    }
    return;
  }
  all_gather_ = collectives_.all_gather(shard_group(), options);
}

void FSDPParamGroup::wait_for_unshard() {
  if (empty()) return;
  if (can_compute_on_shards()) {
    for (auto& p : params_) {
      p->alias_shard();
      p->install_unsharded();
    }
    unsharded_ = on_shards_ = true;
    return;
  }
  if (on_shards_) {  // the shards no longer qualify (a new dtype or place): gather from now on
    reshard();
    on_shards_ = false;
  }
  if (unsharded_) {
    if (shard_versions() == gathered_versions_) return;
    reshard();
  }
  issue_all_gather();
  all_gather_.wait();
  if (all_gather_.output.defined()) {  // a flat buffer: copy out
    std::vector<uint64_t> versions;
    for (auto& p : params_) {
      p->allocate_unsharded(device());
      versions.push_back(p->unsharded().storage().version());
    }
    collectives_.copy_out(all_gather_.output, all_gather_.hosts);
    // Refilling memory autograd saved in forward is not a modification of it.
    for (size_t i = 0; i < params_.size(); ++i) params_[i]->unsharded().storage().restore_version(versions[i]);
  } else {  // gathered in place: the buffers are parameters from now on
    for (auto& p : params_) p->unsharded().storage().set_tag(MemoryTag::param);
  }
  for (auto& p : params_) p->install_unsharded();
  all_gather_ = {};
  unsharded_ = true;
  gathered_versions_ = std::move(issued_versions_);
  // A shard written while its all-gather was in flight (an optimizer step after a
  // prefetch) may have been read half old, half new: gather it again.
  if (shard_versions() != gathered_versions_) wait_for_unshard();
}

std::vector<uint64_t> FSDPParamGroup::shard_versions() const {
  std::vector<uint64_t> versions;
  for (const auto& p : params_) versions.push_back(p->sharded().storage().version());
  return versions;
}

void FSDPParamGroup::reshard(const mesh::ProcessGroupPtr& keep_piece_for) {
  if (all_gather_.work) {  // a prefetch nobody used: finish the collective, drop it
    all_gather_.wait();
    if (!all_gather_.output.defined()) {
      for (auto& p : params_) p->release_unsharded();  // it gathered into them
    }
    all_gather_ = {};
  }
  if (!unsharded_) return;
  if (keep_piece_for && !on_shards_) {
    // This rank keeps the per-rank buffers of the shard ranks of its block of the
    // post-forward group: block j of k covers shard ranks [j * n / k, (j + 1) * n / k).
    const int64_t per_block = shard_size() / keep_piece_for->size();
    post_forward_piece_ = collectives_.keep_piece(keep_piece_for->rank() * per_block, per_block,
                                                  {.dtype = compute_dtype_, .device = device(), .tag = MemoryTag::param});
    post_forward_group_ = keep_piece_for;
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
  if (on_shards_) {
    reduce_on_shards(op);
    return;
  }
  const TensorOptions options{.dtype = reduce_dtype_, .device = device(), .tag = MemoryTag::comm_buffer};
  if (!quantizes_gradients()) {
    reduce_scatter_ = collectives_.reduce_scatter(shard_group(), op, options);
    return;
  }
  if (quantized_.error_feedback && !gradient_residual_.defined()) {
    gradient_residual_ = dtr::zeros({hosts_.hosts * collectives_.numel()},
                                    {.dtype = DType::f32, .device = device(), .tag = MemoryTag::grad});
  }
  reduce_scatter_ = quantized_reduce_scatter(collectives_, hosts_, op, options, quantized_.block_size,
                                             quantized_.gradient_bits, gradient_residual_);
}

void FSDPParamGroup::wait_for_reduce_scatter() {
  if (!reduce_scatter_.work) return;
  reduce_scatter_.wait();
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
  // Each shard's rows of the reduced buffer, scaled and accumulated per parameter.
  // A shard without a .grad in the reduced dtype takes its rows as its .grad
  // (a view, as FSDP2 does: no copy); the others get them cast to their dtype in
  // a new tensor (one launch on CUDA).
  std::vector<CopyJob> copy_out;
  std::vector<Tensor> locals(params_.size());
  bool grads_view_reduced = false;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor shard = params_[i]->sharded();
    if (!shard.requires_grad()) continue;
    Tensor rows = collectives_.shard_rows(reduced, i);
    if (!shard.grad().defined() && rows.dtype() == shard.dtype() && rows.device() == shard.device()) {
      locals[i] = rows;
      grads_view_reduced = true;
      continue;
    }
    locals[i] = dtr::empty(shard.sizes(), {.dtype = shard.dtype(), .device = shard.device()});
    copy_out.push_back({locals[i], rows});
  }
  copy_batch(copy_out);
  if (grads_view_reduced) reduced.storage().set_tag(MemoryTag::grad);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!locals[i].defined()) continue;
    Tensor shard = params_[i]->sharded();
    if (post_divide_ != 1.0) mul_(locals[i], Scalar(1.0 / post_divide_));
    shard.set_grad(shard.grad().defined() ? add(shard.grad(), locals[i]) : locals[i]);
  }
  reduce_scatter_ = {};
}

// What the reduce-scatter and its copy-out compute over one rank: each gradient
// (zeros where none arrived) scaled as the reduce op and post-division would,
// then added to the shard's .grad.
void FSDPParamGroup::reduce_on_shards(mesh::ReduceOp op) {
  DTR_PROFILE_SCOPE("fsdp", "reduce on shards");
  autograd::NoGradGuard no_grad;
  MemoryTagGuard tag(MemoryTag::grad);
  for (auto& p : params_) {
    Tensor grad;
    if (const Tensor& unsharded = p->unsharded(); unsharded.defined()) {
      grad = unsharded.grad();
      unsharded.set_grad({});
    }
    Tensor shard = p->sharded();
    if (!shard.requires_grad()) continue;
    if (!grad.defined()) grad = dtr::zeros(shard.sizes(), {.dtype = shard.dtype(), .device = shard.device()});
    if (op.kind == mesh::ReduceOp::Kind::premul_sum && op.factor != 1.0) grad = mul(grad, Scalar(op.factor));
    if (post_divide_ != 1.0) grad = mul(grad, Scalar(1.0 / post_divide_));
    shard.set_grad(shard.grad().defined() ? add(shard.grad(), grad) : grad);
  }
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
    rows[i] = collectives_.shard_rows(reduced, i);
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
    Tensor grad = dtr::empty(shard.sizes(), {.dtype = shard.dtype(), .device = Device::cpu(), .pin_memory = true});
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
