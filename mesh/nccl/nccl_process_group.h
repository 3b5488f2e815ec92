// NcclProcessGroup: the ProcessGroup backend over NCCL for CUDA tensors. Built
// whenever CUDA and NCCL are found (DTR_WITH_NCCL).
//
// One NCCL communicator per group: rank 0 of the group makes the unique id and
// broadcasts it over the group's MPI communicator (the "bootstrap" group, which
// also carries the DTR_DEBUG_COLLECTIVES exchange). Collectives run on a
// dedicated CUDA stream per group, which first waits for the caller's current
// stream (so inputs are ready); the returned Work is backed by a CUDA event:
// wait() makes the caller's current stream wait on it (the host does not block),
// wait(timeout) blocks the host. Coalescing maps to ncclGroupStart/End. Sub-groups
// come from ncclCommSplit.
#pragma once

#include "mesh/mpi/mpi_process_group.h"
#include "mesh/process_group.h"

#include <memory>
#include <string>

namespace dtr::mesh::nccl {

// Collective over the members of `bootstrap`: a NCCL group over the same ranks,
// on the current CUDA device.
std::shared_ptr<ProcessGroup> create_nccl_group(const std::shared_ptr<mpi::MpiProcessGroup>& bootstrap,
                                                std::string name);

}  // namespace dtr::mesh::nccl
