// Which part of each checkpoint entry a rank writes and which part it needs.
//
// Write: a DTensor's local box, by exactly one rank per distinct box: the rank
// whose coordinate is 0 on every mesh dim that Replicates (so HSDP replicas and
// replicated tensors are written once, not once per replica). A plain Tensor
// (the whole value on every rank) is written by world rank 0. Partial
// placements are refused (reduce them first).
// Read: a DTensor's local box (what spec.local_offset/local_shape say for this
// rank, on whatever mesh it is now), or the whole tensor for a plain Tensor.
#pragma once

#include "dtr/checkpoint/box.h"
#include "dtr/checkpoint/checkpoint_state.h"

#include <optional>
#include <string>

namespace dtr::checkpoint {

using Entry = std::variant<DTensor, Tensor>;

DType entry_dtype(const Entry& entry);
Shape entry_shape(const Entry& entry);  // global
// This rank's data for the entry (the local part, or the tensor).
Tensor entry_local(const Entry& entry);

// The box this rank writes, or nullopt when another rank writes it (or it is empty).
std::optional<Box> box_to_write(const std::string& name, const Entry& entry);
// The box this rank needs on load (its local part).
Box box_to_read(const Entry& entry);

}  // namespace dtr::checkpoint
