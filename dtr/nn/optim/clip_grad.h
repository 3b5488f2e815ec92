// Gradient clipping by total norm, like torch.nn.utils.clip_grad_norm_.
//
// The total norm is the norm of all gradients together, as if concatenated into
// one vector: (sum over every element of |g|^p)^(1/p), or max |g| for p = inf.
// Parameters without a gradient are skipped. Sums accumulate in double.
//
// The computation is split so FSDP can extend it across ranks: local_grad_norm_pow()
// gives this process's part (sum |g|^p, or max |g| for inf) over the gradients it
// holds (local shards); ranks combine those parts (sum, or max for inf) and
// total_norm_from_pow() turns the combined value into the norm; scale_grads_()
// then applies the clip coefficient. clip_grad_norm_() does all three, and knows
// sharded parameters: a sharded nn::Parameter (fully_shard's or a tensor-parallel
// plan's) contributes its local part, combined over the mesh dims that shard it,
// so the norm is the global one on every rank; other parameters, and plain
// tensors, count once.
//
// A NaN gradient makes every norm NaN, the inf-norm included.
//
// CUDA: gradients on a CUDA device are reduced there by multi-tensor kernels
// (dtr/kernels/cuda/grad_norm.h: per-chunk partial sums in double, folded in a fixed
// order, so bitwise reproducible run to run; equal to the CPU's value up to
// double rounding of a different summation order). When every parameter and
// grad lives on one CUDA device, global_grad_norm_pow all-reduces the sharded
// parts as device tensors (NCCL or MPI), and clip_grad_norm_ computes the clip
// coefficient and scales the grads on the device (one launch per dtype) before
// its one host synchronization, the read-back of the norm it returns.
#pragma once

#include "dtr/nn/parameter.h"
#include "dtr/tensor/tensor.h"

#include <vector>

namespace dtr::nn::optim {

// This process's sum of |g|^norm_type over every grad element (max |g| when
// norm_type is inf). norm_type must be > 0 (or inf). 0 when no grad is present.
double local_grad_norm_pow(const std::vector<Tensor>& params, double norm_type = 2.0);

// The norm from a combined local_grad_norm_pow value: pow_sum^(1/norm_type), or
// pow_sum itself for inf.
double total_norm_from_pow(double pow_sum, double norm_type = 2.0);

// Multiplies every present grad by `coef` in place.
void scale_grads_(const std::vector<Tensor>& params, double coef);

// The global sum of |g|^p (max for inf): local parts of sharded parameters
// combined over their mesh (collective over those meshes' groups).
double global_grad_norm_pow(const std::vector<Parameter>& params, double norm_type = 2.0);
double global_grad_norm_pow(const std::vector<Tensor>& params, double norm_type = 2.0);

// Returns the total (global) norm. When it exceeds max_norm (>= 0), scales every grad by
// max_norm / (total + 1e-6), as PyTorch does. When the total norm is NaN or
// infinite the grads are left unchanged (PyTorch would scale them into NaNs);
// the caller sees the non-finite norm and decides (e.g. skips the step), or, with
// error_if_nonfinite (as PyTorch's), gets a dtr::Error saying so.
double clip_grad_norm_(const std::vector<Parameter>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

}  // namespace dtr::nn::optim
