#include "dtr/dtensor/redistribute.h"

#include "dtr/base/error.h"
#include "dtr/dtensor/shard_collectives.h"
#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"

namespace dtr::dtensor {

namespace {

bool any_other_shards(const Placements& a, const Placements& b, int skip, int64_t dim) {
  for (int j = 0; j < static_cast<int>(a.size()); ++j) {
    if (j != skip && (a[j].is_shard(dim) || b[j].is_shard(dim))) return true;
  }
  return false;
}

// The rows of tensor dim `dim` a rank holds under `placements` (this rank's coordinate).
int64_t local_extent(const DTensorSpec& spec, const Placements& placements, int64_t dim) {
  DTensorSpec s = spec;
  s.placements = placements;
  return s.local_shape()[dim];
}

// The local tensor of a Replicate value turned Partial(op) on mesh dim i.
Tensor partition_value(const Tensor& x, mesh::ReduceOp op, int64_t chunks, int64_t coordinate) {
  if (op.kind != mesh::ReduceOp::Kind::sum) return x.clone();  // avg, max, min of k copies is the value
  if (is_floating(x.dtype())) return div(x, Scalar(static_cast<double>(chunks)));
  return coordinate == 0 ? x.clone() : zeros_like(x);
}

Tensor redistribute_no_grad(const Tensor& local, const DTensorSpec& from, const DTensorSpec& to) {
  autograd::NoGradGuard no_grad;
  const mesh::DeviceMesh& m = from.mesh;
  const int n = m.ndim();
  Placements cur = from.placements;
  const Placements& target = to.placements;
  Tensor x = local;

  // Shard(a) -> Shard(b) on one mesh dim, with no other mesh dim involved with a
  // or b: one all-to-all.
  for (int i = 0; i < n; ++i) {
    if (cur[i].is_shard() && target[i].is_shard() && !(cur[i] == target[i]) &&
        !any_other_shards(cur, target, i, cur[i].dim()) && !any_other_shards(cur, target, i, target[i].dim())) {
      const int64_t a = cur[i].dim(), b = target[i].dim();
      Placements gathered = cur;
      gathered[i] = Replicate();
      x = all_to_all_dims(x, *m.group(i), a, local_extent(from, gathered, a), b);
      cur[i] = target[i];
    }
  }

  // Which shards to gather: those that change, and those nested inside (later
  // mesh dims sharding the same tensor dim) a mesh dim that changes.
  std::vector<bool> gather(n, false);
  for (int i = 0; i < n; ++i) {
    if (!cur[i].is_shard()) continue;
    const int64_t d = cur[i].dim();
    gather[i] = !(cur[i] == target[i]);
    for (int k = 0; k < i && !gather[i]; ++k) {
      gather[i] = !(cur[k] == target[k]) && (cur[k].is_shard(d) || target[k].is_shard(d));
    }
  }
  for (int i = n - 1; i >= 0; --i) {
    if (!gather[i]) continue;
    const int64_t d = cur[i].dim();
    Placements gathered = cur;
    gathered[i] = Replicate();
    x = all_gather_dim(x, *m.group(i), d, local_extent(from, gathered, d));
    cur[i] = Replicate();
  }

  // Reduce partials: straight into a shard when nothing else shards that dim.
  for (int i = 0; i < n; ++i) {
    if (!cur[i].is_partial() || cur[i] == target[i]) continue;
    const mesh::ReduceOp op = cur[i].reduce_op();
    if (target[i].is_shard() && !any_other_shards(cur, target, i, target[i].dim())) {
      x = reduce_scatter_dim(x, *m.group(i), target[i].dim(), op);
      cur[i] = target[i];
    } else {
      x = all_reduce(x, *m.group(i), op);
      cur[i] = Replicate();
    }
  }

  // Cut new shards outermost first; turn Replicate into Partial.
  for (int i = 0; i < n; ++i) {
    if (cur[i] == target[i]) continue;
    DTR_INTERNAL_ASSERT(cur[i].is_replicate(), "redistribute {} -> {}: mesh dim {} is still {}",
                        to_string(from.placements), to_string(target), i, cur[i].to_string());
    if (target[i].is_shard()) {
      x = local_chunk(x, target[i].dim(), m.size(i), m.coordinate(i)).clone();
    } else {
      x = partition_value(x, target[i].reduce_op(), m.size(i), m.coordinate(i));
    }
    cur[i] = target[i];
  }
  return x;
}

}  // namespace

Placements gradient_placements(const Placements& placements) {
  Placements result = placements;
  for (auto& p : result) {
    if (p.is_partial()) p = Replicate();
  }
  return result;
}

Tensor redistribute_local(const Tensor& local, const DTensorSpec& from, const DTensorSpec& to) {
  DTR_CHECK(from.mesh == to.mesh, "redistribute: source and target meshes differ: {} vs {}", from.mesh.to_string(),
            to.mesh.to_string());
  if (from.placements == to.placements) return local;
  Tensor out = redistribute_no_grad(local, from, to);
  DTensorSpec grad_from = from.with_placements(gradient_placements(from.placements));
  DTensorSpec grad_to = to.with_placements(gradient_placements(to.placements));
  return autograd::record_unary(local, out, "RedistributeBackward", [grad_from, grad_to](const Tensor& grad) {
    if (grad_from.placements == grad_to.placements) return grad;
    return redistribute_no_grad(grad, grad_to, grad_from);
  });
}

}  // namespace dtr::dtensor
