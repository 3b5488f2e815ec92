// Distributed init: the entry point of every multi-process program.
//
//   dtr::distributed::init();        // under `mpirun -np N`, or as a plain process
//   auto world = dtr::distributed::world_group();
//   ...
//   dtr::distributed::finalize();
//
// init() initialises MPI (or adopts an MPI the caller already initialised), reads
// rank, world size, local rank and the hosts of all ranks, sets the rank shown in every log line, binds
// the CUDA device local_rank % device_count when GPUs exist, and creates the world
// ProcessGroup. Without a launcher it runs as world size 1 (MPI singleton).
// finalize() is idempotent; it waits for nothing: finish outstanding Work first.
//
// A program of one process needs no init(): the first API that needs the world
// (rank(), world_group(), fully_shard, checkpoints, safetensors, ...) initialises a
// world of one itself, and finalize() then runs at exit. Under a launcher that
// started several processes, the same call is an error naming the API: every
// rank has to call init() first, since the world forms collectively.
// init() also gives the step profiler (dtr/tensor/profiler.h) the rank, and
// finalize() stops it when it runs (DTR_PROFILE), writing this rank's trace.
#pragma once

#include "dtr/mesh/process_group.h"
#include "dtr/tensor/device.h"

#include <string>
#include <string_view>

namespace dtr::distributed {

struct InitOptions {
  // Make cuda:(local_rank % device_count) the current device when GPUs exist.
  bool bind_cuda_device = true;
};

void init(const InitOptions& options = {});
void finalize();
bool is_initialized();

// Makes sure the world exists for `api` (the public function the user called,
// named in any error): initialises a world of one when no init() ran and no
// launcher started several processes. Entry points of the layers above call it.
void ensure_initialized(std::string_view api);

int rank();
int world_size();
int local_rank();        // rank among the processes on this node
int local_world_size();  // processes on this node

// The hosts (nodes) of the job as the launcher placed the ranks: ranks that share
// memory are on one host. Hosts are numbered in the order of their lowest rank.
int num_hosts();
int host_of(int rank);                     // the host of world rank `rank`
std::string host_name(int host);  // its processor name (hostname)

// The group of all ranks for tensors on `device_type`: MPI for cpu. For cuda:
// NCCL when dtr was built with it and every rank has a GPU of its own, else MPI
// staging through pinned host memory (so several ranks can share one GPU, e.g.
// in tests). DTR_CUDA_BACKEND=nccl|mpi forces a choice (nccl with a shared GPU
// is an error). The first call for cuda is collective: every rank makes it.
mesh::ProcessGroupPtr world_group(DeviceType device_type = DeviceType::cpu);

}  // namespace dtr::distributed
