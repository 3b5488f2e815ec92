#include "dtr/nn/tensor_parallel/loss_parallel.h"

#include "dtr/base/error.h"
#include "dtr/dtensor/dtensor_spec.h"
#include "dtr/dtensor/shard_collectives.h"
#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/reduce.h"

namespace dtr::nn::tensor_parallel {

namespace {

// The sum over the mesh of every rank's `local`; backward passes the gradient
// through unchanged, since every rank computes the same loss from the sum
// (Megatron's "reduce from the tensor-parallel region").
Tensor sum_over_ranks(const Tensor& local, mesh::ProcessGroup& group) {
  Tensor total = dtensor::all_reduce(local.detach(), group, mesh::ReduceOp::sum());
  return autograd::record_unary(local, total, "SumOverRanksBackward", [](const Tensor& grad) { return grad; });
}

}  // namespace

Tensor vocab_parallel_cross_entropy(const Tensor& local_logits, const Tensor& targets, const mesh::DeviceMesh& mesh,
                                    int64_t vocab_size, int64_t ignore_index) {
  DTR_CHECK(mesh.ndim() == 1, "vocab_parallel_cross_entropy: expected a 1-D tensor-parallel mesh, got {} dims",
            mesh.ndim());
  const ShardRange mine = shard_range(vocab_size, mesh.size(0), mesh.coordinate(0));
  DTR_CHECK(local_logits.dim() == 2 && local_logits.size(1) == mine.length,
            "vocab_parallel_cross_entropy: expected logits [N, {}] (vocabulary entries {}..{} of {} on rank {} of {}), "
            "got {}",
            mine.length, mine.offset, mine.offset + mine.length, vocab_size, mesh.coordinate(0), mesh.size(0),
            shape_str(local_logits.sizes()));
  DTR_CHECK(is_floating(local_logits.dtype()), "vocab_parallel_cross_entropy: expected floating logits, got {}",
            local_logits.dtype());
  DTR_CHECK(targets.dim() == 1 && targets.size(0) == local_logits.size(0) && targets.dtype() == DType::i64,
            "vocab_parallel_cross_entropy: expected i64 targets [{}], got {} {}", local_logits.size(0),
            targets.dtype(), shape_str(targets.sizes()));
  const Tensor valid = ne(targets, Scalar(ignore_index));
  {
    autograd::NoGradGuard no_grad;
    const Tensor outside = add(cast(lt(targets, Scalar(0)), DType::f64), cast(ge(targets, Scalar(vocab_size)), DType::f64));
    DTR_CHECK(sum(mul(cast(valid, DType::f64), outside)).item() == 0,
              "vocab_parallel_cross_entropy: a target is outside [0, {}) and not ignore_index {}", vocab_size,
              ignore_index);
  }
  mesh::ProcessGroup& group = *mesh.group(0);
  // Shifted by the global row maximum (a constant for the gradient).
  Tensor row_max;
  {
    autograd::NoGradGuard no_grad;
    row_max = dtensor::all_reduce(max(local_logits.detach(), 1, /*keepdim=*/true), group, mesh::ReduceOp::max());
  }
  const Tensor shifted = sub(local_logits, row_max);
  const Tensor sum_exp = sum_over_ranks(sum(exp(shifted), {1}), group);
  // The target's shifted logit, from the rank whose slice holds it.
  const Tensor ids = arange(mine.offset, mine.offset + mine.length, 1,
                            {.dtype = DType::i64, .device = local_logits.device()})
                         .reshape({1, mine.length});
  const Tensor is_target = cast(eq(ids, targets.reshape({-1, 1})), shifted.dtype());
  const Tensor target_logit = sum_over_ranks(sum(mul(shifted, is_target), {1}), group);
  const Tensor weight = cast(valid, local_logits.dtype());
  // Rows left out weigh 0; 0 / 0 = NaN when every row is, as cross_entropy.
  return div(sum(mul(sub(log(sum_exp), target_logit), weight)), sum(weight));
}

}  // namespace dtr::nn::tensor_parallel
