// FSDPParam: one parameter under fully_shard: where it lives (the module slots
// holding it; several for tied weights), its global shape and DTensorSpec
// (Shard(0) over the mesh) and rows, and the persistent unsharded tensor installed
// in the slots while the module computes. Its segment of the group's flat buffers
// is dtr/fsdp/flat_collectives.h's.
//
// A parameter a tensor-parallel plan sharded already (its slot holds this rank's
// TP shard, laid out over other dims of the same mesh) is sharded the same way,
// with its TP shard as the tensor to shard: the all-gather gives back the TP
// shard the module computes with, and the layout records both, the TP dims first
// (on a (dp, tp) mesh, a column-wise weight is [Shard(0), Shard(0)] over (tp, dp):
// chunked by tp, then each chunk by dp; PyTorch's _StridedShard).
//
// The unsharded tensor is a leaf that stays the same object across steps; its
// memory (padded to mesh_size x padded_rows rows) is released when resharded and
// reallocated at the next all-gather, so tensors autograd saved in forward stay
// valid handles (their data is refilled before the backward that reads them).
// Over a mesh of one rank the shard is the whole parameter, and the unsharded
// tensor is instead a second leaf over the shard's own memory (alias_shard): the
// module computes on the shard without a copy, and its gradient still arrives
// apart from the shard's .grad, for the group to reduce as usual.
#pragma once

#include "dtr/dtensor/dtensor_spec.h"
#include "dtr/nn/module.h"
#include "dtr/tensor/memory_stats.h"
#include "dtr/tensor/tensor.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dtr::fsdp {

struct ParamSlot {
  nn::Module* module = nullptr;
  std::string name;  // the module's own parameter name
};

// Where a group computes and where its shards live, decided once by fully_shard.
struct GroupPlacement {
  DeviceType device_type = DeviceType::cpu;  // where the group computes and communicates
  // CPU offload of a CUDA model: shards and gradients in host memory (the optimizer
  // steps on the CPU), copied to and from the current CUDA device.
  bool offload = false;
  bool pin_memory = false;  // offloaded shards and gradients pinned: asynchronous copies
};

class FSDPParam {
 public:
  // Shards `full` (the tensor in the slots now) over the last dim of `mesh` (a
  // 2-D mesh replicates over its first dim: HSDP) and installs the shard; the
  // other dims of the mesh `mesh` is cut from replicate it, or shard it as the
  // slot's layout says (tensor parallelism). The
  // unsharded tensor has `compute_dtype` (mixed precision's param_dtype). The
  // shard of a CUDA parameter lives in host memory when the placement offloads.
  FSDPParam(std::string fqn, std::vector<ParamSlot> slots, const Tensor& full, const mesh::DeviceMesh& mesh,
            DType compute_dtype, const GroupPlacement& placement = {});

  const std::string& fqn() const { return fqn_; }
  const Shape& global_shape() const { return spec_->shape; }
  // The shape of the unsharded tensor the module computes with: the global one,
  // or this rank's tensor-parallel shard.
  const Shape& unsharded_shape() const { return unsharded_shape_; }
  const std::shared_ptr<const DTensorSpec>& spec() const { return spec_; }
  DType dtype() const { return spec_->dtype; }          // of the shard (and the optimizer)
  DType compute_dtype() const { return compute_dtype_; }  // of the unsharded tensor

  int64_t row_numel() const { return row_numel_; }      // elements per dim-0 row
  int64_t padded_rows() const { return padded_rows_; }  // ceil(unsharded rows / shard ranks)
  int64_t padded_numel() const { return padded_rows_ * row_numel_; }
  int64_t local_rows() const { return local_rows_; }

  // True when `t` is the tensor this parameter was sharded from: found in another
  // module's slot, it is a weight tied across fully_shard groups.
  bool was_sharded_from(const Tensor& t) const;

  // The shard: the slots' own tensor (read from the slot, so that to_empty /
  // load_state_dict replacing it are seen).
  Tensor sharded() const;
  // The unsharded tensor (allocated or not).
  const Tensor& unsharded() const { return unsharded_; }
  // The padded unsharded buffer [mesh size * padded_rows, row_numel].
  const Tensor& unsharded_padded() const { return unsharded_padded_; }

  // Makes sure the unsharded tensor exists with memory (after a release); new
  // memory is counted under `tag`.
  void allocate_unsharded(Device device, MemoryTag tag = MemoryTag::param);
  void release_unsharded();  // a no-op while it aliases the shard
  bool unsharded_allocated() const;
  // Makes the unsharded tensor a leaf over the shard's memory (again, when the
  // slots got a new shard). Only over one rank, where the shard is the whole
  // parameter in the compute dtype.
  void alias_shard();

  // Makes every slot's module compute with the unsharded tensor / with the shard
  // again (nn::Module::install_parameter; the shard stays the slots' own tensor).
  void install_unsharded();
  void install_sharded();
  bool unsharded_installed() const { return unsharded_installed_; }

 private:
  std::string fqn_;
  std::vector<ParamSlot> slots_;
  std::shared_ptr<const DTensorSpec> spec_;
  Shape unsharded_shape_;
  int64_t shard_ranks_ = 1;
  std::weak_ptr<const void> original_;  // the tensor sharded (not kept alive)
  int64_t row_numel_ = 1;
  int64_t padded_rows_ = 0;
  int64_t local_rows_ = 0;
  bool requires_grad_ = true;
  DType compute_dtype_ = DType::f32;
  Tensor unsharded_padded_;
  Tensor unsharded_;
  bool unsharded_installed_ = false;
  bool aliases_shard_ = false;
};

}  // namespace dtr::fsdp
