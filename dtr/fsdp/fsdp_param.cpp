#include "dtr/fsdp/fsdp_param.h"

#include "dtr/base/error.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/memory_stats.h"

namespace dtr::fsdp {

namespace {

// The layout of a parameter FSDP shards: the layout it had before (a tensor-
// parallel one) on its mesh dims, Replicate on the other dims of the mesh `mesh`
// is cut from, then FSDP's own (Shard(0) over the last dim of `mesh`, HSDP
// replicating over its first).
DTensorSpec layout_under_fsdp(const std::string& fqn, const Tensor& full, const DTensorSpec* before,
                              const mesh::DeviceMesh& mesh) {
  mesh::DeviceMesh outer;
  Placements placements;
  Shape shape = full.sizes();
  if (before) {
    DTR_CHECK(!before->has_partial(), "fully_shard: parameter '{}' is laid out {}, with a Partial placement", fqn,
              before->to_string());
    outer = before->mesh;
    placements = before->placements;
    shape = before->shape;
  }
  mesh::DeviceMesh rest;
  try {
    rest = mesh::join(outer, mesh).remaining_dims();
  } catch (const Error&) {
    DTR_FAIL("fully_shard: parameter '{}' is already sharded over {} (tensor parallelism); FSDP's mesh {} must be "
             "other dims of the same mesh: init_device_mesh(type, {{dp, tp}}, {{\"dp\", \"tp\"}}), then "
             "parallelize over mesh[\"tp\"] and fully_shard over mesh[\"dp\"]",
             fqn, outer.to_string(), mesh.to_string());
  }
  placements.insert(placements.end(), rest.defined() ? rest.ndim() : 0, Replicate());
  placements.insert(placements.end(), mesh.ndim() - 1, Replicate());
  placements.push_back(Shard(0));
  return DTensorSpec::make(mesh::join(mesh::join(outer, rest), mesh), std::move(placements), std::move(shape),
                           full.dtype());
}

}  // namespace

FSDPParam::FSDPParam(std::string fqn, std::vector<ParamSlot> slots, const Tensor& full,
                     const mesh::DeviceMesh& mesh, DType compute_dtype, const GroupPlacement& placement)
    : fqn_(std::move(fqn)), slots_(std::move(slots)), compute_dtype_(compute_dtype) {
  DTR_CHECK(full.dim() >= 1, "fully_shard: parameter '{}' is 0-dim; sharding on dim 0 needs at least one dim",
            fqn_);
  const nn::Parameter handle = slots_.front().module->parameter_handle(slots_.front().name);
  spec_ = std::make_shared<const DTensorSpec>(layout_under_fsdp(fqn_, full, handle.sharding(), mesh));
  unsharded_shape_ = full.sizes();
  shard_ranks_ = mesh.size(mesh.ndim() - 1);
  row_numel_ = numel_of(Shape(full.sizes().begin() + 1, full.sizes().end()));
  padded_rows_ = padded_shard_length(full.size(0), shard_ranks_);
  const ShardRange rows = shard_range(full.size(0), shard_ranks_, mesh.coordinate(mesh.ndim() - 1));
  local_rows_ = rows.length;
  requires_grad_ = full.requires_grad();
  DTR_INTERNAL_ASSERT(spec_->local_shape()[0] == local_rows_, "fully_shard: '{}': {} gives {} rows, not {}", fqn_,
                      spec_->to_string(), spec_->local_shape()[0], local_rows_);

  autograd::NoGradGuard no_grad;
  MemoryTagGuard tag(MemoryTag::param);
  const int64_t offset = rows.offset;
  const Device shard_device = placement.offload && full.device().is_cuda() ? Device::cpu() : full.device();
  Tensor shard = full.device().is_meta() ? empty(spec_->local_shape(), {.dtype = full.dtype(), .device = full.device()})
                 : shard_device == full.device() ? full.narrow(0, offset, local_rows_).clone()
                                                 : full.narrow(0, offset, local_rows_).to(shard_device);
  shard.storage().set_tag(MemoryTag::param);
  if (placement.pin_memory && shard.device().is_cpu()) shard.storage().pin();  // a meta shard: at its first all-gather
  if (requires_grad_) shard.requires_grad_();
  original_ = full.weak_ref();
  for (auto& slot : slots_) slot.module->set_sharded_parameter(slot.name, shard, spec_);
}

bool FSDPParam::was_sharded_from(const Tensor& t) const {
  const auto other = t.weak_ref();
  std::owner_less<std::weak_ptr<const void>> before;
  return !before(original_, other) && !before(other, original_);
}

Tensor FSDPParam::sharded() const { return slots_.front().module->parameter_handle(slots_.front().name).data(); }

void FSDPParam::allocate_unsharded(Device device, MemoryTag tag) {
  autograd::NoGradGuard no_grad;
  if (aliases_shard_) {  // the shard changed dtype or place: gather into memory of its own
    install_sharded();
    unsharded_ = Tensor();
    aliases_shard_ = false;
  }
  if (!unsharded_.defined()) {
    unsharded_padded_ =
        empty({shard_ranks_ * padded_rows_, row_numel_}, {.dtype = compute_dtype_, .device = device, .tag = tag});
    unsharded_ = unsharded_padded_.narrow(0, 0, unsharded_shape_[0]).view(unsharded_shape_);
    if (requires_grad_) unsharded_.requires_grad_();
    return;
  }
  if (!unsharded_.storage().is_allocated()) unsharded_.storage().set_tag(tag);  // counted under `tag` from the start
  unsharded_.storage().reallocate();
}

void FSDPParam::release_unsharded() {
  if (unsharded_.defined() && !aliases_shard_) unsharded_.storage().release();
}

void FSDPParam::alias_shard() {
  const Tensor shard = sharded();
  DTR_INTERNAL_ASSERT(shard.sizes() == unsharded_shape_ && shard.dtype() == compute_dtype_,
                      "alias_shard: '{}' is not whole in its compute dtype", fqn_);
  if (aliases_shard_ && unsharded_.storage().is_same(shard.storage()) &&
      unsharded_.storage_offset() == shard.storage_offset() && unsharded_.strides() == shard.strides()) {
    return;
  }
  install_sharded();  // the slots must take the new tensor
  unsharded_ = shard.detach();
  unsharded_padded_ = Tensor();
  if (requires_grad_) unsharded_.requires_grad_();
  aliases_shard_ = true;
}

bool FSDPParam::unsharded_allocated() const { return unsharded_.defined() && unsharded_.storage().is_allocated(); }

void FSDPParam::install_unsharded() {
  if (unsharded_installed_) return;
  for (auto& slot : slots_) slot.module->install_parameter(slot.name, unsharded_);
  unsharded_installed_ = true;
}

void FSDPParam::install_sharded() {
  if (!unsharded_installed_) return;
  for (auto& slot : slots_) slot.module->install_parameter(slot.name, std::nullopt);
  unsharded_installed_ = false;
}

}  // namespace dtr::fsdp
