#include "dtr/fsdp/summary.h"

#include "dtr/fsdp/distinct_tensors.h"
#include "dtr/fsdp/fully_shard.h"
#include "dtr/nn/module.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <variant>

namespace dtr::fsdp {

namespace {

std::string opt_dtype(const std::optional<DType>& d) { return d ? std::string(dtype_name(*d)) : "-"; }

std::string module_list(const std::optional<std::vector<nn::Module*>>& modules,
                        const std::map<const nn::Module*, std::string>& paths) {
  if (!modules) return "implicit";
  std::string out = "[";
  for (size_t i = 0; i < modules->size(); ++i) {
    auto it = paths.find((*modules)[i]);
    const std::string name = it == paths.end() ? "?" : (it->second.empty() ? "(root)" : it->second);
    out += (i ? ", " : "") + name;
  }
  return out + "]";
}

GroupSummary group_of(nn::Module& module, bool is_top, const std::map<const nn::Module*, std::string>& paths) {
  FSDPModule h = fsdp_module(module);
  GroupSummary g;
  const auto params = h.sharded_parameters();
  g.num_tensors = static_cast<int64_t>(params.size());
  g.shard_numel_padded = h.shard_numel_padded();
  for (auto& [name, d] : params) g.shard_numel += d.to_local().numel();
  g.padding = g.shard_numel_padded - g.shard_numel;
  const auto& o = h.options();
  if (!params.empty()) g.shard_dtype = params.front().second.dtype();
  g.compute_dtype = o.mp_policy.param_dtype && is_floating(g.shard_dtype) ? *o.mp_policy.param_dtype : g.shard_dtype;
  g.shard_bytes = g.shard_numel_padded * static_cast<int64_t>(element_size(g.compute_dtype));
  const int last = o.mesh.ndim() - 1;
  g.shard_rank = o.mesh.coordinate(last);
  g.shard_ranks = o.mesh.size(last);
  g.mesh = o.mesh.to_string();
  for (auto& [name, d] : params) {
    // The dims before FSDP's in the layout are the other dims of the mesh: split where they shard.
    const DTensorSpec& spec = d.spec();
    const int outer = spec.mesh.ndim() - o.mesh.ndim();
    std::vector<std::string> dims;
    bool split = false;
    for (int i = 0; i < outer; ++i) {
      split = split || spec.placements[static_cast<size_t>(i)].is_shard();
      dims.push_back(fmt::format("{}={}", spec.mesh.dim_names()[static_cast<size_t>(i)], spec.mesh.size(i)));
    }
    if (!split) continue;
    ++g.num_tensor_parallel;
    g.tensor_parallel_mesh = fmt::format("({})", fmt::join(dims, ", "));
  }
  g.mp_policy = fmt::format("param={} reduce={} output={} cast_inputs={}", opt_dtype(o.mp_policy.param_dtype),
                            opt_dtype(o.mp_policy.reduce_dtype), opt_dtype(o.mp_policy.output_dtype),
                            o.mp_policy.cast_forward_inputs ? 1 : 0);
  if (!o.reshard_after_forward) {
    g.reshard_after_forward = is_top ? "default(false, root)" : "default(true)";
  } else if (std::holds_alternative<bool>(*o.reshard_after_forward)) {
    g.reshard_after_forward = std::get<bool>(*o.reshard_after_forward) ? "true" : "false";
  } else {
    g.reshard_after_forward = std::to_string(std::get<int>(*o.reshard_after_forward));
  }
  if (const auto& q = o.quantized_comm; q.weights || q.gradient_bits != 0) {
    g.quantized_comm = fmt::format("weights={} grads={}{} host_size={}", q.weights ? "int8" : "-",
                                   q.gradient_bits != 0 ? fmt::format("int{}", q.gradient_bits) : "-",
                                   q.gradient_bits != 0 && !q.error_feedback ? " (no error feedback)" : "",
                                   q.host_size == 0 ? "hosts" : std::to_string(q.host_size));
  }
  g.forward_prefetch = module_list(h.modules_to_forward_prefetch(), paths);
  g.backward_prefetch = module_list(h.modules_to_backward_prefetch(), paths);
  return g;
}

void visit(nn::Module& module, const std::string& path, int depth, bool under_group,
           const std::map<const nn::Module*, std::string>& paths, ModelSummary& out) {
  ModuleSummaryRow row;
  row.path = path;
  row.type = module.type_name();
  row.depth = depth;
  std::vector<Tensor> seen;
  for (auto& [name, p] : module.named_parameters()) {
    const Tensor& t = p.data();
    if (!add_unique(seen, t)) continue;
    row.num_params += p.global_numel();
    row.bytes += p.global_numel() * static_cast<int64_t>(element_size(p.data().dtype()));
  }
  const bool sharded = is_fully_sharded(module);
  if (sharded) row.group = group_of(module, !under_group, paths);
  out.rows.push_back(std::move(row));
  for (auto& [name, child] : module.named_children()) {
    visit(*child, nn::qualified_name(path, name), depth + 1, under_group || sharded, paths, out);
  }
}

std::string human(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{} B", bytes);
}

}  // namespace

ModelSummary summarize(nn::Module& root) {
  std::map<const nn::Module*, std::string> paths;
  for (auto& [path, m] : root.named_modules()) paths.emplace(m, path);
  ModelSummary s;
  visit(root, "", 0, false, paths, s);
  s.total_params = s.rows.front().num_params;
  for (auto& r : s.rows) s.num_groups += r.group ? 1 : 0;
  return s;
}

std::string ModelSummary::to_string() const {
  std::string out = fmt::format("Model summary: {} params, {} FSDP groups\n", total_params, num_groups);
  for (const auto& r : rows) {
    const std::string indent(static_cast<size_t>(2 * r.depth), ' ');
    out += fmt::format("{}{} ({}): {} params, {} B ({}){}\n", indent, r.path.empty() ? "(root)" : r.path, r.type,
                       r.num_params, r.bytes, human(r.bytes), r.group ? " [FSDP group]" : "");
    if (!r.group) continue;
    const auto& g = *r.group;
    const std::string tensor_parallel =
        g.num_tensor_parallel == 0
            ? ""
            : fmt::format("; {} tensors split over {} first (tensor parallel)", g.num_tensor_parallel,
                          g.tensor_parallel_mesh);
    out += fmt::format(
        "{}  group: {} tensors, shard_numel_padded={} ({} B {}) holds={} padding={} on rank {} of {}; shard dtype {}, "
        "{}{}\n",
        indent, g.num_tensors, g.shard_numel_padded, g.shard_bytes, dtype_name(g.compute_dtype), g.shard_numel,
        g.padding, g.shard_rank, g.shard_ranks, dtype_name(g.shard_dtype), g.mesh, tensor_parallel);
    out += fmt::format("{}  mp_policy {}; reshard_after_forward={}; prefetch forward={} backward={}{}\n", indent,
                       g.mp_policy, g.reshard_after_forward, g.forward_prefetch, g.backward_prefetch,
                       g.quantized_comm.empty() ? "" : "; quantized_comm " + g.quantized_comm);
  }
  return out;
}

}  // namespace dtr::fsdp
