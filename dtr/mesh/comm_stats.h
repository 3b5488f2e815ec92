// CommStats: how many collectives a ProcessGroup issued and how many payload bytes
// this rank contributed to them, per kind of collective. Tests and benchmarks use
// them to check what was communicated (e.g. mixed precision halves all-gather bytes).
#pragma once

#include "dtr/mesh/collective.h"

#include <array>
#include <cstdint>

namespace dtr::mesh {

struct CommStats {
  std::array<int64_t, kNumCollectiveKinds> calls{};
  // Bytes of this rank's input: the shard for all_gather, the full buffer for
  // reduce_scatter and all_reduce, the tensor for broadcast/send/recv.
  std::array<int64_t, kNumCollectiveKinds> bytes{};

  int64_t calls_of(CollectiveKind kind) const { return calls[static_cast<int>(kind)]; }
  int64_t bytes_of(CollectiveKind kind) const { return bytes[static_cast<int>(kind)]; }
};

}  // namespace dtr::mesh
