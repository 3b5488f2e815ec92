#include "dtr/fsdp/fsdp_param.h"

#include "dtr/base/error.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/memory_stats.h"

namespace dtr::fsdp {

FSDPParam::FSDPParam(std::string fqn, std::vector<ParamSlot> slots, const Tensor& full,
                     const mesh::DeviceMesh& mesh, DType compute_dtype, const GroupPlacement& placement)
    : fqn_(std::move(fqn)), slots_(std::move(slots)), compute_dtype_(compute_dtype) {
  DTR_CHECK(full.dim() >= 1, "fully_shard: parameter '{}' is 0-dim; sharding on dim 0 needs at least one dim",
            fqn_);
  Placements placements(mesh.ndim(), Replicate());
  placements.back() = Shard(0);
  auto spec = DTensorSpec::make(mesh, std::move(placements), full.sizes(), full.dtype());
  const int64_t k = mesh.size(mesh.ndim() - 1);
  row_numel_ = numel_of(Shape(full.sizes().begin() + 1, full.sizes().end()));
  padded_rows_ = padded_shard_length(full.size(0), k);
  local_rows_ = spec.local_shape()[0];
  requires_grad_ = full.requires_grad();
  spec_ = std::make_shared<const DTensorSpec>(std::move(spec));

  autograd::NoGradGuard no_grad;
  MemoryTagGuard tag(MemoryTag::param);
  const int64_t offset = spec_->local_offset()[0];
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
    const int64_t k = spec_->mesh.size(spec_->mesh.ndim() - 1);
    unsharded_padded_ = empty({k * padded_rows_, row_numel_}, {.dtype = compute_dtype_, .device = device, .tag = tag});
    unsharded_ = unsharded_padded_.narrow(0, 0, global_shape()[0]).view(global_shape());
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
  DTR_INTERNAL_ASSERT(shard.sizes() == global_shape() && shard.dtype() == compute_dtype_,
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
