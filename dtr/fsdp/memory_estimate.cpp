#include "dtr/fsdp/memory_estimate.h"

#include "dtr/base/error.h"
#include "dtr/dtensor/dtensor_spec.h"
#include "dtr/fsdp/distinct_tensors.h"

#include <fmt/format.h>

#include <algorithm>

namespace dtr::fsdp {

namespace {

struct Layout {
  std::string name;
  int shard_ranks = 1;
  int shard_index = 0;
  bool reshard_after_forward = true;
};

Layout layout_of(const MemoryEstimateOptions& o, int world_size) {
  DTR_CHECK(world_size >= 1, "estimate_memory: expected a positive world size, got {}", world_size);
  DTR_CHECK(o.rank >= 0 && o.rank < world_size, "estimate_memory: rank {} is not in [0, {})", o.rank, world_size);
  Layout l;
  switch (o.strategy) {
    case ShardingStrategy::full_shard: l = {"FULL_SHARD", world_size, o.rank, true}; break;
    case ShardingStrategy::shard_grad_op: l = {"SHARD_GRAD_OP", world_size, o.rank, false}; break;
    case ShardingStrategy::no_shard: l = {"NO_SHARD", 1, 0, false}; break;
    case ShardingStrategy::hybrid_shard: {
      const int k = o.hybrid_shard_size > 0 ? o.hybrid_shard_size : (world_size % 2 == 0 ? 2 : 1);
      DTR_CHECK(world_size % k == 0, "estimate_memory: hybrid shard size {} must divide the world size {}", k,
                world_size);
      // Mesh (world / k, k) in row-major order: the shard coordinate is rank % k.
      l = {fmt::format("HYBRID_SHARD({})", k), k, o.rank % k, true};
      break;
    }
  }
  return l;
}

int64_t size_of(DType d) { return static_cast<int64_t>(element_size(d)); }

}  // namespace

MemoryEstimate estimate_memory(nn::Module& model, const WrapPolicy& policy, int world_size,
                               const MemoryEstimateOptions& options, const ActivationModel& activations) {
  const Layout l = layout_of(options, world_size);
  MemoryEstimate e;
  e.strategy = l.name;
  e.world_size = world_size;
  e.shard_ranks = l.shard_ranks;
  // Groups as apply_fully_shard makes them: each selected module takes its
  // subtree's parameters not taken before (post-order), the root the rest.
  std::vector<std::pair<std::string, nn::Module*>> order = select_modules(model, policy);
  order.emplace_back("", &model);
  std::vector<Tensor> claimed;
  const int64_t k = l.shard_ranks;
  for (auto& [path, m] : order) {
    GroupEstimate g;
    g.path = path;
    std::optional<DType> group_compute;
    bool computes_on_shards = world_size == 1;  // FSDPParamGroup's one-rank case: no unsharded copies
    for (auto& [name, p] : m->named_parameters()) {
      if (!add_unique(claimed, p.data())) continue;
      // What fully_shard will shard: the tensor-parallel split when there is one.
      const auto split = options.tensor_parallel_shapes.find(path.empty() ? name : path + "." + name);
      const Shape shape = split != options.tensor_parallel_shapes.end() ? split->second : p.global_shape();
      DTR_CHECK(!shape.empty(), "estimate_memory: parameter '{}' is 0-dim (fully_shard needs dim 0)", name);
      const int64_t numel = numel_of(shape);
      const int64_t rows = shape[0], row_numel = numel / std::max<int64_t>(rows, 1);
      const int64_t chunk = (rows + k - 1) / k;
      const int64_t local_rows = std::clamp<int64_t>(rows - l.shard_index * chunk, 0, chunk);
      const DType dtype = p.data().dtype();
      const DType compute = options.param_dtype && is_floating(dtype) ? *options.param_dtype : dtype;
      group_compute = compute;
      computes_on_shards = computes_on_shards && compute == dtype;
      g.numel += numel;
      g.shard_numel += local_rows * row_numel;
      g.flat_numel += chunk * row_numel;
      e.params += local_rows * row_numel * size_of(dtype);
    }
    g.unsharded_bytes = group_compute && !computes_on_shards ? k * g.flat_numel * size_of(*group_compute) : 0;
    e.num_params += g.numel;
    e.groups.push_back(g);
  }
  e.grads = e.params;
  e.optimizer_state = 2 * e.params;  // AdamW: exp_avg and exp_avg_sq
  if (l.reshard_after_forward) {
    std::vector<int64_t> others;
    for (size_t i = 0; i + 1 < e.groups.size(); ++i) others.push_back(e.groups[i].unsharded_bytes);
    std::sort(others.rbegin(), others.rend());
    e.unsharded_peak = e.groups.back().unsharded_bytes;
    if (!others.empty()) e.unsharded_peak += others.front();
    // reshard_after_forward = k: in the first block's backward the others still
    // hold the pieces they kept after forward, and that block its own until the
    // all-gather that reads it is done.
    const int k = options.reshard_after_forward_ranks;
    if (k > 1 && k < l.shard_ranks) {
      DTR_CHECK(l.shard_ranks % k == 0, "estimate_memory: reshard_after_forward_ranks {} must divide the {} shard ranks",
                k, l.shard_ranks);
      for (const int64_t bytes : others) e.unsharded_peak += bytes / k;
    }
  } else {
    for (auto& g : e.groups) e.unsharded_peak += g.unsharded_bytes;
  }
  if (activations) {
    e.activations_no_ckpt = activations(options.batch_size, options.seq_len, options.param_dtype, false);
    e.activations_ckpt = activations(options.batch_size, options.seq_len, options.param_dtype, true);
    e.activations = options.activation_checkpointing ? e.activations_ckpt : e.activations_no_ckpt;
  }
  return e;
}

namespace {

std::string gib(int64_t bytes) { return fmt::format("{:.3f}", static_cast<double>(bytes) / (1024.0 * 1024 * 1024)); }

}  // namespace

std::string MemoryEstimate::to_string() const {
  std::string out = fmt::format("{} over {} ranks (parameters split over {}), {} params, {} groups\n", strategy,
                                world_size, shard_ranks, num_params, groups.size());
  out += fmt::format("  params          {:>16} B  ({} GiB)\n", params, gib(params));
  out += fmt::format("  grads           {:>16} B  ({} GiB)\n", grads, gib(grads));
  out += fmt::format("  optimizer_state {:>16} B  ({} GiB)\n", optimizer_state, gib(optimizer_state));
  out += fmt::format("  unsharded_peak  {:>16} B  ({} GiB)\n", unsharded_peak, gib(unsharded_peak));
  out += fmt::format("  activations     {:>16} B  ({} GiB; no ckpt {}, ckpt {})\n", activations, gib(activations),
                     gib(activations_no_ckpt), gib(activations_ckpt));
  out += fmt::format("  total           {:>16} B  ({} GiB)\n", total(), gib(total()));
  return out;
}

std::string memory_table(nn::Module& model, const WrapPolicy& policy, int world_size, MemoryEstimateOptions base,
                         const ActivationModel& activations) {
  std::string out = fmt::format(
      "per-rank memory estimate (GiB): {} ranks, batch {} x seq {} per rank, compute {}\n", world_size,
      base.batch_size, base.seq_len > 0 ? fmt::format("{}", base.seq_len) : std::string("(the model's longest)"),
      base.param_dtype ? dtype_name(*base.param_dtype) : "the parameters' dtypes");
  out += fmt::format("{:<18} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "strategy", "ckpt", "params",
                     "grads", "optim", "unsharded", "activ", "total", "params(#)");
  for (ShardingStrategy s : {ShardingStrategy::full_shard, ShardingStrategy::shard_grad_op, ShardingStrategy::no_shard,
                             ShardingStrategy::hybrid_shard}) {
    for (bool ckpt : {false, true}) {
      MemoryEstimateOptions o = base;
      o.strategy = s;
      o.activation_checkpointing = ckpt;
      const MemoryEstimate e = estimate_memory(model, policy, world_size, o, activations);
      out += fmt::format("{:<18} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n", e.strategy,
                         ckpt ? "yes" : "no", gib(e.params), gib(e.grads), gib(e.optimizer_state),
                         gib(e.unsharded_peak), gib(e.activations), gib(e.total()), e.num_params);
    }
  }
  return out;
}

}  // namespace dtr::fsdp
