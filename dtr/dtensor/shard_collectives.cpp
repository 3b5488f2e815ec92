#include "dtr/dtensor/shard_collectives.h"

#include "dtr/base/error.h"
#include "dtr/dtensor/dtensor_spec.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/memory_stats.h"

#include <numeric>

namespace dtr::dtensor {

namespace {

Tensor comm_buffer(const Shape& shape, const Tensor& like, bool zero) {
  TensorOptions options{.dtype = like.dtype(), .device = like.device(), .tag = MemoryTag::comm_buffer};
  return zero ? zeros(shape, options) : empty(shape, options);
}

// `t` with `dim` first (other dims in order) and the permutation that undoes it.
std::vector<int64_t> dim_first(int64_t ndim, int64_t dim) {
  std::vector<int64_t> order = {dim};
  for (int64_t d = 0; d < ndim; ++d) {
    if (d != dim) order.push_back(d);
  }
  return order;
}

std::vector<int64_t> inverse(const std::vector<int64_t>& order) {
  std::vector<int64_t> inv(order.size());
  for (size_t i = 0; i < order.size(); ++i) inv[order[i]] = static_cast<int64_t>(i);
  return inv;
}

}  // namespace

Tensor local_chunk(const Tensor& t, int64_t dim, int64_t chunks, int64_t index) {
  ShardRange r = shard_range(t.size(dim), chunks, index);
  return t.narrow(dim, r.offset, r.length);
}

Tensor all_gather_dim(const Tensor& local, mesh::ProcessGroup& group, int64_t dim, int64_t full_size) {
  autograd::NoGradGuard no_grad;
  const int64_t k = group.size();
  const int64_t chunk = padded_shard_length(full_size, k);
  const ShardRange mine = shard_range(full_size, k, group.rank());
  DTR_INTERNAL_ASSERT(local.size(dim) == mine.length, "all_gather_dim: local dim {} has {} rows, expected {}", dim,
                      local.size(dim), mine.length);
  const auto order = dim_first(local.dim(), dim);
  Tensor moved = local.permute(order);
  Shape padded_shape = moved.sizes();
  padded_shape[0] = chunk;
  Tensor padded = comm_buffer(padded_shape, local, /*zero=*/mine.length < chunk);
  padded.narrow(0, 0, mine.length).copy_(moved);
  Shape gathered_shape = padded_shape;
  gathered_shape[0] = chunk * k;
  Tensor gathered = comm_buffer(gathered_shape, local, false);
  group.all_gather_into_tensor(gathered, padded)->wait();
  // Chunks start at r * chunk, so the valid rows are exactly [0, full_size).
  Tensor result = gathered.narrow(0, 0, full_size).permute(inverse(order)).contiguous();
  return result;
}

Tensor reduce_scatter_dim(const Tensor& full, mesh::ProcessGroup& group, int64_t dim, mesh::ReduceOp op) {
  autograd::NoGradGuard no_grad;
  const int64_t k = group.size();
  const int64_t n = full.size(dim);
  const int64_t chunk = padded_shard_length(n, k);
  const auto order = dim_first(full.dim(), dim);
  Tensor moved = full.permute(order);
  Shape padded_shape = moved.sizes();
  padded_shape[0] = chunk * k;
  Tensor padded = comm_buffer(padded_shape, full, /*zero=*/chunk * k > n);
  padded.narrow(0, 0, n).copy_(moved);
  Shape out_shape = padded_shape;
  out_shape[0] = chunk;
  Tensor out = comm_buffer(out_shape, full, false);
  group.reduce_scatter_tensor(out, padded, op)->wait();
  const ShardRange mine = shard_range(n, k, group.rank());
  return out.narrow(0, 0, mine.length).permute(inverse(order)).contiguous();
}

Tensor all_reduce(const Tensor& t, mesh::ProcessGroup& group, mesh::ReduceOp op) {
  autograd::NoGradGuard no_grad;
  Tensor result = t.detach().clone();
  group.all_reduce(result, op)->wait();
  return result;
}

Tensor all_to_all_dims(const Tensor& local, mesh::ProcessGroup& group, int64_t from_dim, int64_t from_size,
                       int64_t to_dim) {
  autograd::NoGradGuard no_grad;
  DTR_INTERNAL_ASSERT(from_dim != to_dim, "all_to_all_dims: from_dim == to_dim");
  const int64_t k = group.size();
  const int64_t from_chunk = padded_shard_length(from_size, k);
  const int64_t to_size = local.size(to_dim);
  const int64_t to_chunk = padded_shard_length(to_size, k);
  const ShardRange mine_from = shard_range(from_size, k, group.rank());
  // Pad both dims: from_dim to one chunk, to_dim to k chunks.
  Shape padded_shape = local.sizes();
  padded_shape[from_dim] = from_chunk;
  padded_shape[to_dim] = to_chunk * k;
  Tensor padded = comm_buffer(padded_shape, local, true);
  padded.narrow(from_dim, 0, mine_from.length).narrow(to_dim, 0, to_size).copy_(local);
  // Block r of to_dim goes to rank r: put to_dim first so blocks are contiguous.
  const auto order = dim_first(local.dim(), to_dim);
  Tensor send = padded.permute(order).contiguous();
  Tensor received = comm_buffer(send.sizes(), local, false);
  group.all_to_all_single(received, send)->wait();
  // received = [k (source rank), to_chunk, rest...]: source s holds its rows of
  // from_dim. Move the source axis next to from_dim and merge them.
  Shape split_shape = send.sizes();
  split_shape[0] = to_chunk;
  split_shape.insert(split_shape.begin(), k);
  Tensor blocks = received.view(split_shape);
  // Position of from_dim among `order` (after to_dim), shifted by the new leading axis.
  const int64_t from_pos = std::find(order.begin(), order.end(), from_dim) - order.begin() + 1;
  std::vector<int64_t> perm;
  for (int64_t i = 1; i < static_cast<int64_t>(split_shape.size()); ++i) {
    if (i == from_pos) perm.push_back(0);
    perm.push_back(i);
  }
  Tensor merged_view = blocks.permute(perm);  // [to_chunk, ..., k, from_chunk, ...]
  Shape merged_shape = send.sizes();
  merged_shape[0] = to_chunk;
  merged_shape[from_pos - 1] = k * from_chunk;
  Tensor merged = merged_view.reshape(merged_shape);
  const ShardRange mine_to = shard_range(to_size, k, group.rank());
  return merged.narrow(0, 0, mine_to.length)
      .narrow(from_pos - 1, 0, from_size)
      .permute(inverse(order))
      .contiguous();
}

}  // namespace dtr::dtensor
