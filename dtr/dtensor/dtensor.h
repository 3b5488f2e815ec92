// DTensor: a tensor distributed over a DeviceMesh. It is a local Tensor (this
// rank's part) plus a DTensorSpec (mesh, placements, global shape, dtype).
//
//   auto mesh = mesh::init_device_mesh(DeviceType::cpu, {world_size});
//   DTensor w = distribute_tensor(full, mesh, {Shard(0)});   // each rank keeps its rows
//   DTensor r = w.redistribute({Replicate()});                // all-gather
//   Tensor t = w.full_tensor();                               // the global value on every rank
//
// Autograd flows through the local tensors: from_local, to_local, redistribute
// and distribute_tensor are differentiable, and the gradient of a DTensor leaf is
// a DTensor with the leaf's placements (Partial becomes Replicate); see
// dtr/dtensor/redistribute.h for the semantics.
//
// Random fills match the unsharded tensor element for element: each rank fills
// its box of the global tensor with Philox values indexed by global position.
#pragma once

#include "dtr/dtensor/dtensor_spec.h"
#include "dtr/tensor/random.h"
#include "dtr/tensor/tensor.h"

#include <optional>

namespace dtr {

struct FromLocalOptions {
  // The global shape; when absent, every Shard(d) is taken to be even
  // (global size = local size x mesh dim size), as PyTorch does.
  std::optional<Shape> shape{};
  // All-gather every rank's local shape and check they fit the placements
  // (default: on when DTR_DEBUG_COLLECTIVES is set). Collective over the mesh.
  std::optional<bool> run_check{};
};

class DTensor {
 public:
  DTensor() = default;  // undefined

  // Wraps this rank's local tensor; no communication (unless run_check).
  static DTensor from_local(const Tensor& local, const mesh::DeviceMesh& mesh, Placements placements,
                            const FromLocalOptions& options = {});
  // The spec and local tensor must agree (local shape == spec.local_shape()).
  DTensor(Tensor local, DTensorSpec spec);

  // Global-shape factories: each rank allocates only its local part.
  static DTensor empty(const Shape& shape, const mesh::DeviceMesh& mesh, Placements placements,
                       const TensorOptions& options = {});
  static DTensor zeros(const Shape& shape, const mesh::DeviceMesh& mesh, Placements placements,
                       const TensorOptions& options = {});
  static DTensor ones(const Shape& shape, const mesh::DeviceMesh& mesh, Placements placements,
                      const TensorOptions& options = {});
  // Filled like uniform_/normal_ of the whole global tensor would fill it.
  static DTensor rand(const Shape& shape, const mesh::DeviceMesh& mesh, Placements placements,
                      const TensorOptions& options = {}, Generator* gen = nullptr);
  static DTensor randn(const Shape& shape, const mesh::DeviceMesh& mesh, Placements placements,
                       const TensorOptions& options = {}, Generator* gen = nullptr);

  bool defined() const { return local_.defined(); }
  const Tensor& to_local() const { return local_; }
  const DTensorSpec& spec() const { return spec_; }
  const mesh::DeviceMesh& device_mesh() const { return spec_.mesh; }
  const Placements& placements() const { return spec_.placements; }
  const Shape& shape() const { return spec_.shape; }
  int64_t size(int64_t dim) const;
  int64_t dim() const { return spec_.ndim(); }
  int64_t numel() const { return numel_of(spec_.shape); }
  DType dtype() const { return spec_.dtype; }
  Device device() const { return local_.device(); }

  // Same mesh, new placements (communication as needed). Differentiable.
  DTensor redistribute(Placements placements) const;
  // The global tensor, on every rank (redistribute to Replicate). Differentiable.
  Tensor full_tensor() const;

  // Fills the local part as a fill of the whole global tensor would (Shard and
  // Replicate placements; Partial has no single value to fill).
  const DTensor& uniform_(double lo = 0, double hi = 1, Generator* gen = nullptr) const;
  const DTensor& normal_(double mean = 0, double std = 1, Generator* gen = nullptr) const;

  // Autograd on the local tensor.
  const DTensor& requires_grad_(bool on = true) const;
  bool requires_grad() const { return local_.requires_grad(); }
  // The gradient as a DTensor (placements: this one's, Partial -> Replicate);
  // undefined when there is none.
  DTensor grad() const;
  DTensor detach() const;

  std::string to_string() const;

 private:
  Tensor local_;
  DTensorSpec spec_;
};

// Splits `full` (the same global tensor on every rank of the mesh) by `placements`.
// With src_rank, only that world rank's `full` holds the values: the others pass
// a tensor of the same shape and dtype, and it is broadcast first. Differentiable
// (without src_rank).
DTensor distribute_tensor(const Tensor& full, const mesh::DeviceMesh& mesh, Placements placements,
                          std::optional<int> src_rank = std::nullopt);

}  // namespace dtr
