#include "dtr/mesh/collective.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>

namespace dtr::mesh {

std::string_view collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::broadcast: return "broadcast";
    case CollectiveKind::all_to_all: return "all_to_all";
    case CollectiveKind::barrier: return "barrier";
    case CollectiveKind::send: return "send";
    case CollectiveKind::recv: return "recv";
  }
  return "unknown";
}

namespace {

void record_shape(const Tensor& t, int32_t& dims, std::array<int64_t, CollectiveCall::kMaxDims>& shape,
                  int64_t& numel) {
  if (!t.defined()) return;
  dims = static_cast<int32_t>(t.dim());
  numel = t.numel();
  for (int64_t d = 0; d < std::min<int64_t>(t.dim(), CollectiveCall::kMaxDims); ++d) shape[d] = t.size(d);
}

std::string shape_text(int32_t dims, const std::array<int64_t, CollectiveCall::kMaxDims>& shape,
                       int64_t numel) {
  if (dims > CollectiveCall::kMaxDims) return fmt::format("[{} dims, {} elements]", dims, numel);
  std::vector<int64_t> sizes(shape.begin(), shape.begin() + dims);
  return fmt::format("[{}]", fmt::join(sizes, ", "));
}

}  // namespace

CollectiveCall describe_call(CollectiveKind kind, int64_t sequence, const Tensor& input,
                             const Tensor& output, std::optional<ReduceOp> op, int root) {
  CollectiveCall call;
  call.kind = kind;
  call.sequence = sequence;
  const Tensor& any = input.defined() ? input : output;
  call.dtype = any.defined() ? static_cast<int32_t>(any.dtype()) : -1;
  if (op) {
    call.reduce_kind = static_cast<int32_t>(op->kind);
    call.reduce_factor = op->factor;
  }
  call.root = root;
  record_shape(input, call.input_dims, call.input_shape, call.input_numel);
  record_shape(output, call.output_dims, call.output_shape, call.output_numel);
  return call;
}

CollectiveCall describe_coalesced_call(CollectiveKind kind, int64_t sequence, const std::vector<Tensor>& inputs,
                                       const std::vector<Tensor>& outputs, std::optional<ReduceOp> op) {
  CollectiveCall call = describe_call(kind, sequence, inputs.front(), outputs.front(), op);
  auto record_total = [](const std::vector<Tensor>& tensors, int32_t& dims,
                         std::array<int64_t, CollectiveCall::kMaxDims>& shape, int64_t& numel) {
    numel = 0;
    for (const Tensor& t : tensors) numel += t.numel();
    dims = 1;
    shape = {};
    shape[0] = numel;
  };
  record_total(inputs, call.input_dims, call.input_shape, call.input_numel);
  record_total(outputs, call.output_dims, call.output_shape, call.output_numel);
  call.coalesced = static_cast<int32_t>(inputs.size());
  std::vector<int64_t> sizes;
  for (const Tensor& t : inputs) sizes.push_back(t.numel());
  call.coalesced_sizes = XXH64(sizes.data(), sizes.size() * sizeof(int64_t), /*seed=*/0);
  return call;
}

std::string to_string(const CollectiveCall& call) {
  std::string text = fmt::format("{} #{}", collective_name(call.kind), call.sequence);
  if (call.reduce_kind >= 0) {
    text += fmt::format(" {}", to_string(ReduceOp{static_cast<ReduceOp::Kind>(call.reduce_kind), call.reduce_factor}));
  }
  if (call.dtype >= 0) text += fmt::format(" {}", dtype_name(static_cast<DType>(call.dtype)));
  if (call.input_dims > 0 || call.input_numel > 0 || call.dtype >= 0) {
    std::string in = shape_text(call.input_dims, call.input_shape, call.input_numel);
    std::string out = shape_text(call.output_dims, call.output_shape, call.output_numel);
    text += fmt::format(" {}", in);
    if (call.output_dims > 0 && out != in) text += fmt::format(" -> {}", out);
  }
  if (call.kind == CollectiveKind::broadcast) text += fmt::format(" root {}", call.root);
  if (call.uneven_splits) text += " (explicit splits)";
  if (call.coalesced > 0) {
    text += fmt::format(" ({} tensor{} coalesced, sizes #{:08x})", call.coalesced, call.coalesced == 1 ? "" : "s",
                        call.coalesced_sizes & 0xffffffffu);
  }
  return text;
}

std::string find_desync(const std::vector<CollectiveCall>& calls_by_rank) {
  if (calls_by_rank.empty()) return {};
  const CollectiveCall& first = calls_by_rank.front();
  auto agrees = [&](const CollectiveCall& c) {
    if (c.kind != first.kind || c.sequence != first.sequence || c.dtype != first.dtype ||
        c.reduce_kind != first.reduce_kind || c.reduce_factor != first.reduce_factor ||
        c.root != first.root || c.uneven_splits != first.uneven_splits || c.coalesced != first.coalesced ||
        c.coalesced_sizes != first.coalesced_sizes) {
      return false;
    }
    if (c.kind == CollectiveKind::all_to_all && c.uneven_splits) return true;
    return c.input_dims == first.input_dims && c.input_shape == first.input_shape &&
           c.input_numel == first.input_numel && c.output_dims == first.output_dims &&
           c.output_shape == first.output_shape && c.output_numel == first.output_numel;
  };
  if (std::all_of(calls_by_rank.begin(), calls_by_rank.end(), agrees)) return {};
  std::string text = "the ranks called different collectives:";
  for (size_t r = 0; r < calls_by_rank.size(); ++r) {
    text += fmt::format("\n  rank {}: {}", r, to_string(calls_by_rank[r]));
  }
  return text;
}

}  // namespace dtr::mesh
