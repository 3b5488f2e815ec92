#include "dtr/nn/tensor_parallel/parallelize_module.h"

#include "dtr/base/error.h"
#include "dtr/dtensor/dtensor_ops.h"
#include "dtr/dtensor/sharding/grad_sync.h"
#include "dtr/nn/layers.h"
#include "dtr/nn/linear.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/reduce.h"

#include <map>
#include <memory>
#include <optional>
#include <utility>

namespace dtr::nn::tensor_parallel {

namespace {

// Replaces parameter `name` of `linear` with its local shard under `placements`.
void shard_parameter(nn::Module& module, const std::string& name, const mesh::DeviceMesh& mesh,
                     Placements placements) {
  const Tensor& full = module.parameter(name);
  DTensor d = distribute_tensor(full.detach(), mesh, std::move(placements));
  Tensor local = d.to_local().detach().clone();
  local.requires_grad_(full.requires_grad());
  module.set_sharded_parameter(name, local, std::make_shared<const DTensorSpec>(d.spec()));
}

// The placement on the tensor-parallel dim of each parameter `style` lays out on
// `target`: a column-wise Linear's weight and bias by rows, a row-wise one's
// weight by columns (its bias whole), a vocabulary-parallel Embedding's table by
// rows. SequenceParallel and PrepareModuleInput leave the parameters as they are.
std::vector<std::pair<std::string, Placement>> planned_placements(const nn::Module& target, const ParallelStyle& style) {
  if (std::holds_alternative<SequenceParallel>(style) || std::holds_alternative<PrepareModuleInput>(style)) return {};
  if (dynamic_cast<const nn::Embedding*>(&target) != nullptr) return {{"weight", Shard(0)}};
  const bool colwise = std::holds_alternative<ColwiseParallel>(style);
  std::vector<std::pair<std::string, Placement>> out{{"weight", colwise ? Shard(0) : Shard(1)}};
  if (target.has_parameter("bias")) out.emplace_back("bias", colwise ? Placement(Shard(0)) : Placement(Replicate()));
  return out;
}

void shard_planned_parameters(nn::Module& target, const ParallelStyle& style, const mesh::DeviceMesh& mesh) {
  for (const auto& [param, placement] : planned_placements(target, style)) shard_parameter(target, param, mesh, {placement});
}

// The module the plan names `name`, or an error listing the module's names.
nn::Module& planned_module(const std::vector<std::pair<std::string, nn::Module*>>& modules, const std::string& name) {
  for (const auto& [n, m] : modules) {
    if (n == name) return *m;
  }
  std::vector<std::string> known;
  for (const auto& [n, m] : modules) known.push_back(n.empty() ? "\"\"" : n);
  DTR_FAIL("parallelize_module: the plan names module '{}', which is not in the module (it has: {})", name,
           fmt::join(known, ", "));
}

// The global shape of a module input whose local tensor is `local` under `layout`:
// a Shard of the last dim has `last_size` rows in all; other shards are even.
Shape input_global_shape(const Tensor& local, const mesh::DeviceMesh& mesh, const Placement& layout,
                         int64_t last_size) {
  Shape shape = local.sizes();
  if (!layout.is_shard()) return shape;
  const int64_t d = layout.dim() < 0 ? layout.dim() + local.dim() : layout.dim();
  DTR_CHECK(d >= 0 && d < local.dim(), "tensor parallel: input layout {} is out of range for an input of shape {}",
            layout.to_string(), shape_str(local.sizes()));
  shape[d] = d == local.dim() - 1 ? last_size : shape[d] * mesh.size(0);
  return shape;
}

// The same on every rank for a Replicate input, so that a bad input is refused
// by all ranks before any collective.
void check_global_input(const std::string& module_name, const Shape& global, int64_t in) {
  DTR_CHECK(!global.empty() && global.back() == in,
            "tensor parallel '{}': expected an input whose last dim is {} (in_features), got global shape {}",
            module_name, in, shape_str(global));
}

void check_input(const nn::Linear& linear, const std::string& module_name, const Tensor& input, int64_t local_in) {
  const Tensor& w = linear.parameter("weight");
  DTR_CHECK(input.dim() >= 1 && input.size(-1) == local_in,
            "tensor parallel '{}': expected an input whose last dim is {} on this rank, got shape {}", module_name,
            local_in, shape_str(input.sizes()));
  DTR_CHECK(input.dtype() == w.dtype() && input.device() == w.device(),
            "tensor parallel '{}': expected an input of dtype {} on {}, got {} on {}", module_name, w.dtype(),
            w.device(), input.dtype(), input.device());
}

// The whole input of column-wise products from its `layout`, its gradient summed
// over the mesh in backward (each rank's backward sees only its output
// features): a sequence shard is all-gathered and its gradient reduce-scattered
// back; a whole input's gradient is all-reduced.
Tensor whole_input_summing_grad(const Tensor& input, const mesh::DeviceMesh& mesh, const Placement& layout,
                                const Shape& global, std::optional<DType> reduce_dtype) {
  if (layout.is_shard()) {
    const int64_t d = layout.dim() < 0 ? layout.dim() + input.dim() : layout.dim();
    if (d != input.dim() - 1) return dtensor::all_gather_sum_grad(input, mesh, 0, d, global[d], reduce_dtype);
  }
  DTensor x = DTensor::from_local(input, mesh, {layout}, {.shape = global});
  return dtensor::all_reduce_grad(x.redistribute({Replicate()}).to_local(), mesh, {0}, reduce_dtype);
}

void apply_colwise(nn::Linear& linear, const std::string& name, const mesh::DeviceMesh& mesh,
                   const ColwiseParallel& style) {
  shard_planned_parameters(linear, style, mesh);
  const int64_t in = linear.in_features(), out = linear.out_features();
  linear.register_forward_pre_hook([mesh, style, in, name](nn::Module& m, const Tensor& input) {
    const Placement layout = style.input_prepared ? Placement(Replicate()) : style.input_layout;
    const Shape global = input_global_shape(input, mesh, layout, in);
    check_global_input(name, global, in);
    if (style.input_prepared) {
      check_input(static_cast<nn::Linear&>(m), name, input, in);
      return input;
    }
    Tensor local = whole_input_summing_grad(input, mesh, layout, global, style.grad_reduce_dtype);
    check_input(static_cast<nn::Linear&>(m), name, local, in);
    return local;
  });
  linear.register_forward_hook([mesh, style, out](nn::Module&, const Tensor&, const Tensor& output) {
    Shape shape = output.sizes();
    shape.back() = out;
    DTensor y(output, DTensorSpec::make(mesh, {Shard(output.dim() - 1)}, shape, output.dtype()));
    return y.redistribute({style.output_layout}).to_local();
  });
}

void apply_rowwise(nn::Linear& linear, const std::string& name, const mesh::DeviceMesh& mesh,
                   const RowwiseParallel& style) {
  // Each rank's product is a partial sum: an activation must wait for the all-reduce.
  DTR_CHECK(linear.activation() == LinearActivation::none,
            "parallelize_module: RowwiseParallel on '{}', a Linear with a fused activation; its partial "
            "sums would pass through the activation before they are reduced (use ColwiseParallel there, "
            "or a Linear without an activation followed by the activation module)",
            name);
  shard_planned_parameters(linear, style, mesh);
  const bool has_bias = linear.has_parameter("bias");
  const int64_t in = linear.in_features();
  const int64_t local_in = linear.parameter("weight").size(1);
  // What the bias slot had installed (fully_shard's unsharded bias), put back after the forward.
  auto bias_installed = std::make_shared<std::optional<Tensor>>();
  linear.register_forward_pre_hook([mesh, style, in, local_in, name, has_bias, bias_installed](nn::Module& m,
                                                                                              const Tensor& input) {
    auto& lin = static_cast<nn::Linear&>(m);
    const Shape global = input_global_shape(input, mesh, style.input_layout, in);
    check_global_input(name, global, in);
    DTensor x = DTensor::from_local(input, mesh, {style.input_layout}, {.shape = global});
    Tensor local = x.redistribute({Shard(input.dim() - 1)}).to_local();
    check_input(lin, name, local, local_in);
    if (has_bias) {
      *bias_installed = lin.installed_parameter("bias");
      lin.install_parameter("bias", Tensor());  // the forward runs without it
    }
    return local;
  });
  linear.register_forward_hook([mesh, style, has_bias, bias_installed](nn::Module& m, const Tensor&,
                                                                      const Tensor& output) {
    DTensor y(output, DTensorSpec::make(mesh, {Partial()}, output.sizes(), output.dtype()));
    y = y.redistribute({style.output_layout});
    if (!has_bias) return y.to_local();
    m.install_parameter("bias", std::exchange(*bias_installed, std::nullopt));
    // A Replicate bias on a sharded output syncs its gradient.
    const Tensor& bias = m.parameter("bias");
    return dtensor::add(y, DTensor(bias, DTensorSpec::make(mesh, {Replicate()}, bias.sizes(), bias.dtype())))
        .to_local();
  });
}

// RowwiseParallel on an Embedding, a vocabulary-parallel embedding: each rank
// holds its rows of the table (Shard(0)), looks up the ids in its range (the
// others read row 0 and are zeroed), and the partial sums are reduced to the
// output layout (Replicate: all-reduce). The ids are whole on every rank.
void apply_vocab_parallel(nn::Embedding& embedding, const std::string& name, const mesh::DeviceMesh& mesh,
                          const RowwiseParallel& style) {
  DTR_CHECK(style.input_layout.is_replicate() || style.input_layout == RowwiseParallel{}.input_layout,
            "parallelize_module: RowwiseParallel on the Embedding '{}' takes the token ids whole (Replicate); "
            "input_layout {} is not supported",
            name, style.input_layout.to_string());
  const int64_t vocab = embedding.parameter("weight").size(0);
  DTR_CHECK(vocab >= mesh.size(0), "parallelize_module: the Embedding '{}' has {} rows, fewer than the {} ranks",
            name, vocab, mesh.size(0));
  shard_planned_parameters(embedding, style, mesh);
  const ShardRange rows = shard_range(vocab, mesh.size(0), mesh.coordinate(0));
  // This call's ids less the first row this rank holds, from the pre-hook to the hook.
  auto shifted = std::make_shared<Tensor>();
  embedding.register_forward_pre_hook([rows, vocab, name, shifted](nn::Module&, const Tensor& ids) {
    DTR_CHECK(ids.dtype() == DType::i64, "tensor parallel '{}': expected i64 token ids, got {}", name, ids.dtype());
    autograd::NoGradGuard no_grad;
    const double outside =
        sum(add(cast(lt(ids, Scalar(0)), DType::f64), cast(ge(ids, Scalar(vocab)), DType::f64))).item();
    DTR_CHECK(outside == 0, "tensor parallel '{}': {} token ids are outside [0, {})", name, outside, vocab);
    *shifted = sub(ids, Scalar(rows.offset));
    // Ids of other ranks' rows read row 0; the hook zeroes what they read.
    return where(lt(*shifted, Scalar(0)), zeros_like(*shifted), minimum(*shifted, Scalar(rows.length - 1)));
  });
  embedding.register_forward_hook([mesh, style, rows, shifted, name](nn::Module&, const Tensor&, const Tensor& output) {
    Tensor held;
    {
      autograd::NoGradGuard no_grad;
      held = mul(cast(ge(*shifted, Scalar(0)), output.dtype()), cast(lt(*shifted, Scalar(rows.length)), output.dtype()))
                 .unsqueeze(-1);
      *shifted = Tensor();
    }
    if (style.output_layout.is_shard()) {
      const int64_t d = style.output_layout.dim() < 0 ? style.output_layout.dim() + output.dim()
                                                      : style.output_layout.dim();
      DTR_CHECK(d >= 0 && d < output.dim() && output.size(d) % mesh.size(0) == 0,
                "tensor parallel '{}': output layout {} on an output of shape {}: the dim must divide by the {} ranks "
                "(a sequence-parallel sequence length)",
                name, style.output_layout.to_string(), shape_str(output.sizes()), mesh.size(0));
    }
    DTensor y(mul(output, held), DTensorSpec::make(mesh, {Partial()}, output.sizes(), output.dtype()));
    return y.redistribute({style.output_layout}).to_local();
  });
}

// PrepareModuleInput: the module's input made whole once, its gradient summed
// once, for the column-wise layers inside (ColwiseParallel::input_prepared).
void apply_prepare_input(nn::Module& module, const std::string& name, const mesh::DeviceMesh& mesh,
                         const PrepareModuleInput& style) {
  module.register_forward_pre_hook([mesh, style, name](nn::Module&, const Tensor& input) {
    DTR_CHECK(input.dim() >= 1, "tensor parallel '{}': expected an input with dims, got a 0-d tensor", name);
    const Shape global = input_global_shape(input, mesh, style.input_layout, input.size(-1));
    return whole_input_summing_grad(input, mesh, style.input_layout, global, style.grad_reduce_dtype);
  });
}

// SequenceParallel: every parameter of the module itself stays whole, and each
// forward computes with it (or with what fully_shard installed for it) passed
// through a gradient sum over the mesh, then puts back what was installed.
void apply_sequence_parallel(nn::Module& module, const std::string& name, const mesh::DeviceMesh& mesh,
                             const SequenceParallel& style) {
  std::vector<std::string> params;
  for (const auto& [n, p] : module.named_parameters(/*recurse=*/false)) params.push_back(n);
  DTR_CHECK(!params.empty(), "parallelize_module: SequenceParallel on '{}', a {} without parameters of its own",
            name, module.type_name());
  auto installed = std::make_shared<std::vector<std::optional<Tensor>>>(params.size());
  module.register_forward_pre_hook([mesh, params, installed, style](nn::Module& m, const Tensor&) {
    for (size_t i = 0; i < params.size(); ++i) {
      (*installed)[i] = m.installed_parameter(params[i]);
      m.install_parameter(params[i],
                          dtensor::all_reduce_grad(m.parameter(params[i]), mesh, {0}, style.grad_reduce_dtype));
    }
    return Tensor();
  });
  module.register_forward_hook([params, installed](nn::Module& m, const Tensor&, const Tensor&) {
    for (size_t i = 0; i < params.size(); ++i) m.install_parameter(params[i], std::exchange((*installed)[i], std::nullopt));
    return Tensor();
  });
}

}  // namespace

void parallelize_module(nn::Module& module, const mesh::DeviceMesh& mesh, const ParallelizePlan& plan) {
  DTR_CHECK(mesh.defined() && mesh.ndim() == 1, "parallelize_module: expected a 1-D mesh for tensor parallelism, got {}",
            mesh.to_string());
  auto modules = module.named_modules();
  for (const auto& [name, style] : plan) {
    nn::Module* target = &planned_module(modules, name);
    if (const auto* sp = std::get_if<SequenceParallel>(&style)) {
      apply_sequence_parallel(*target, name, mesh, *sp);
      continue;
    }
    if (const auto* prepare = std::get_if<PrepareModuleInput>(&style)) {
      apply_prepare_input(*target, name, mesh, *prepare);
      continue;
    }
    if (auto* embedding = dynamic_cast<nn::Embedding*>(target);
        embedding != nullptr && std::holds_alternative<RowwiseParallel>(style)) {
      apply_vocab_parallel(*embedding, name, mesh, std::get<RowwiseParallel>(style));
      continue;
    }
    auto* linear = dynamic_cast<nn::Linear*>(target);
    DTR_CHECK(linear != nullptr, "parallelize_module: module '{}' is a {}; ColwiseParallel and RowwiseParallel apply to "
              "Linear layers only (RowwiseParallel also to an Embedding: a vocabulary-parallel table)",
              name, target->type_name());
    if (const auto* col = std::get_if<ColwiseParallel>(&style)) {
      apply_colwise(*linear, name, mesh, *col);
    } else {
      apply_rowwise(*linear, name, mesh, std::get<RowwiseParallel>(style));
    }
  }
}

std::map<std::string, Shape> local_parameter_shapes(nn::Module& module, const ParallelizePlan& plan, int64_t ranks,
                                                    int64_t rank) {
  DTR_CHECK(ranks >= 1 && rank >= 0 && rank < ranks,
            "local_parameter_shapes: expected a rank in [0, {}) of a positive number of ranks, got rank {}", ranks, rank);
  const auto modules = module.named_modules();
  std::map<std::string, Shape> shapes;
  for (const auto& [name, style] : plan) {
    const nn::Module& target = planned_module(modules, name);
    for (const auto& [param, placement] : planned_placements(target, style)) {
      Shape shape = target.parameter(param).sizes();
      if (placement.is_shard()) {
        const int64_t d = placement.dim() < 0 ? placement.dim() + static_cast<int64_t>(shape.size()) : placement.dim();
        shape[d] = shard_range(shape[d], ranks, rank).length;
      }
      shapes[name.empty() ? param : name + "." + param] = shape;
    }
  }
  return shapes;
}

DTensor parameter_dtensor(const nn::Module& module, const std::string& name) {
  for (const auto& [n, p] : module.named_parameters()) {
    if (n != name) continue;
    DTR_CHECK(p.is_sharded(), "parameter_dtensor: '{}' is not a parameter the tensor-parallel plan sharded", name);
    return p.as_dtensor();
  }
  DTR_FAIL("parameter_dtensor: the module has no parameter '{}'", name);
}

}  // namespace dtr::nn::tensor_parallel
