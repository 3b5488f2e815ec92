// CollectiveKind and CollectiveCall: what one call into a ProcessGroup is (op,
// sequence number, dtype, shapes, reduce op, root/peer). Used to describe a call
// in errors and logs, and, with DTR_DEBUG_COLLECTIVES=1, exchanged between the
// ranks before each collective so that mismatched calls (a desync) raise an error
// on every rank instead of hanging.
#pragma once

#include "dtr/mesh/reduce_op.h"
#include "dtr/tensor/dtype.h"
#include "dtr/tensor/tensor.h"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtr::mesh {

enum class CollectiveKind : int32_t {
  all_gather,
  reduce_scatter,
  all_reduce,
  broadcast,
  all_to_all,
  barrier,
  send,
  recv,
};
inline constexpr int kNumCollectiveKinds = 8;

std::string_view collective_name(CollectiveKind kind);  // "all_gather", ...

// A fixed-size, trivially copyable record of one call, so that ranks can exchange
// it as raw bytes.
struct CollectiveCall {
  static constexpr int kMaxDims = 8;

  CollectiveKind kind = CollectiveKind::barrier;
  int32_t dtype = -1;  // DType as int; -1 for barrier
  int64_t sequence = 0;
  int32_t reduce_kind = -1;  // ReduceOp::Kind as int; -1 when the op has none
  double reduce_factor = 1.0;
  int32_t root = -1;  // broadcast root, send/recv peer
  int32_t input_dims = 0;
  int32_t output_dims = 0;
  std::array<int64_t, kMaxDims> input_shape{};   // -1 beyond kMaxDims: see numel
  std::array<int64_t, kMaxDims> output_shape{};
  int64_t input_numel = 0;
  int64_t output_numel = 0;
  int32_t uneven_splits = 0;  // all_to_all with explicit split sizes
  int32_t coalesced = 0;  // tensor pairs of a coalesced call (its shapes are then the flat totals); 0 for one
  uint64_t coalesced_sizes = 0;  // a hash of the pairs' input element counts, in order

  bool operator==(const CollectiveCall&) const = default;
};

// Builds the record; undefined tensors leave their shape empty.
CollectiveCall describe_call(CollectiveKind kind, int64_t sequence, const Tensor& input,
                             const Tensor& output, std::optional<ReduceOp> op = {},
                             int root = -1);
// The record of a coalesced call over tensor pairs (inputs[i], outputs[i]) of one
// dtype: their element counts as flat totals.
CollectiveCall describe_coalesced_call(CollectiveKind kind, int64_t sequence, const std::vector<Tensor>& inputs,
                                       const std::vector<Tensor>& outputs, std::optional<ReduceOp> op = {});

// "all_reduce #3 sum f32 [4, 8]" (input -> output shape where they differ).
std::string to_string(const CollectiveCall& call);

// Whether the calls of all ranks agree: same op, sequence number, dtype, reduce op
// and root, the number and sizes of coalesced tensors, and the shapes the op needs
// to match (all of them, except the inputs and outputs of an all_to_all with
// explicit splits). Returns an empty string when they agree, else a message
// listing every rank's call.
std::string find_desync(const std::vector<CollectiveCall>& calls_by_rank);

}  // namespace dtr::mesh
