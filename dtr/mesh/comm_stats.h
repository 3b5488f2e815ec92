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
  // The bytes this rank sent, by the link they crossed: to a rank of its own
  // host, or to another host (distributed::host_of; one host when the job was
  // not started by distributed::init). Counted as a ring over the group's ranks
  // in rank order would send them, each to the next rank of the ring: all_gather
  // (k - 1) x its shard; reduce_scatter (k - 1) / k of its buffer; all_reduce
  // twice that (a reduce-scatter, then an all-gather); broadcast the tensor,
  // but the last rank of the ring from the root. all_to_all sends a 1 / k share
  // to each other rank, send the tensor to its peer. A model of the traffic,
  // not a measurement: MPI and NCCL pick their own algorithms, but
  // bandwidth-bound collectives move a ring's volume.
  int64_t sent_within_host = 0;
  int64_t sent_across_hosts = 0;

  int64_t calls_of(CollectiveKind kind) const { return calls[static_cast<int>(kind)]; }
  int64_t bytes_of(CollectiveKind kind) const { return bytes[static_cast<int>(kind)]; }
};

}  // namespace dtr::mesh
