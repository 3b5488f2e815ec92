// NcclProcessGroup: the ProcessGroup backend over NCCL for CUDA tensors. Built
// whenever CUDA and NCCL are found (DTR_WITH_NCCL).
//
// One NCCL communicator per group: rank 0 of the group makes the unique id and
// broadcasts it over the group's MPI communicator (the "bootstrap" group, which
// also carries the DTR_DEBUG_COLLECTIVES exchange). Collectives run on a
// dedicated CUDA stream per group, which first waits for the caller's current
// stream (so inputs are ready); the returned Work is backed by a CUDA event:
// wait() makes the caller's current stream wait on it (the host does not block),
// wait(timeout) blocks the host. barrier().wait() blocks the host too, as a
// barrier should. Coalescing maps to ncclGroupStart/End. Sub-groups come from
// ncclCommSplit (and a split of the bootstrap group).
//
// Tensors must be on the group's device (the CUDA device current when the group
// was made). Every dtype is supported; reduce ops: sum, max, min, avg (ncclAvg,
// floating dtypes only: avg on an integer dtype is an error here) and premul_sum
// (ncclRedOpCreatePreMulSum). Tensors are recorded on the group's stream with
// the caching allocator, and each Work keeps its tensors alive.
//
// Point to point: NCCL matches sends and receives by issue order per peer, not
// by tag (the tag is accepted and ignored). Sends and receives run in issue
// order on the group's stream, so an exchange in which every rank first
// receives and then sends (a ring) deadlocks unless it is coalesced
// (start_coalescing / end_coalescing turns it into one NCCL group call).
//
// Threads: as with NCCL itself, issue a group's calls from one thread at a time;
// Works may be waited on and polled (the watchdog does) from any thread.
//
// nccl.h stays out of this header (pimpl), so consumers of dtr do not need it.
#pragma once

#include "dtr/mesh/mpi/mpi_process_group.h"
#include "dtr/mesh/process_group.h"

#include <functional>
#include <memory>
#include <string>

struct ncclComm;  // nccl.h's ncclComm_t is ncclComm*

namespace dtr::mesh::nccl {

class NcclProcessGroup;

// Collective over the members of `bootstrap`: a NCCL group over the same ranks,
// on the current CUDA device.
std::shared_ptr<ProcessGroup> create_nccl_group(const std::shared_ptr<mpi::MpiProcessGroup>& bootstrap,
                                                std::string name);

class NcclProcessGroup final : public ProcessGroup {
 public:
  ~NcclProcessGroup() override;

  std::string_view backend() const override { return "nccl"; }
  int device() const;  // the CUDA device of this group's tensors
  const std::shared_ptr<mpi::MpiProcessGroup>& bootstrap() const;

 protected:
  WorkPtr do_all_gather(const Tensor& out, const Tensor& in, const CollectiveCall& call) override;
  WorkPtr do_reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op, const CollectiveCall& call) override;
  WorkPtr do_all_reduce(const Tensor& t, ReduceOp op, const CollectiveCall& call) override;
  WorkPtr do_broadcast(const Tensor& t, int root, const CollectiveCall& call) override;
  WorkPtr do_all_to_all(const Tensor& out, const Tensor& in, const std::vector<int64_t>& out_counts,
                        const std::vector<int64_t>& in_counts, const CollectiveCall& call) override;
  WorkPtr do_barrier(const CollectiveCall& call) override;
  WorkPtr do_send(const Tensor& t, int dst, int tag, const CollectiveCall& call) override;
  WorkPtr do_recv(const Tensor& t, int src, int tag, const CollectiveCall& call) override;
  void do_start_coalescing() override;
  void do_end_coalescing() override;
  std::shared_ptr<ProcessGroup> do_split(int color, int key, std::string name) override;
  std::vector<CollectiveCall> exchange_calls(const CollectiveCall& mine) override;
  void check_device(const Tensor& t, std::string_view op) const override;

 private:
  struct Impl;
  friend std::shared_ptr<ProcessGroup> create_nccl_group(const std::shared_ptr<mpi::MpiProcessGroup>& bootstrap,
                                                         std::string name);

  // Takes ownership of `comm`, a communicator over the members of `bootstrap` on `device`.
  NcclProcessGroup(std::shared_ptr<mpi::MpiProcessGroup> bootstrap, ncclComm* comm, int device, std::string name);

  // Enqueues `issue` (the NCCL calls) on the group's stream after the caller's
  // current stream, records `tensors` on that stream and returns the Work.
  WorkPtr launch(const CollectiveCall& call, std::vector<Tensor> tensors, const std::function<void(Impl&)>& issue,
                 bool blocking_wait = false);

  std::unique_ptr<Impl> impl_;
};

}  // namespace dtr::mesh::nccl
