// MpiProcessGroup: the ProcessGroup backend over Open MPI. Collectives are MPI's
// non-blocking calls (MPI_Iallgather, MPI_Ireduce_scatter_block, MPI_Iallreduce,
// MPI_Ibcast, MPI_Ialltoall[v], MPI_Ibarrier, MPI_Isend/Irecv; the coalesced
// collectives of CPU tensors as MPI_Isend/Irecv of each tensor) on a communicator
// of the group's own, advanced by the progress engine (mpi_progress.h) while the
// caller computes. CPU tensors are used in place; CUDA tensors are staged through
// pinned host memory (host_staging.h).
#pragma once

#include "dtr/mesh/process_group.h"

#include <mpi.h>

namespace dtr::mesh::mpi {

class MpiProcessGroup final : public ProcessGroup {
 public:
  // Takes ownership of `comm` (a communicator dtr created; freed with the group).
  static std::shared_ptr<MpiProcessGroup> create(MPI_Comm comm, std::string name);
  ~MpiProcessGroup() override;

  std::string_view backend() const override { return "mpi"; }
  MPI_Comm comm() const { return comm_; }

  // The DTR_DEBUG_COLLECTIVES exchange of every member's call on this group's
  // communicator, bounded by the collective timeout (past it the process ends,
  // naming the members that never arrived and `what`, the collective). The NCCL
  // backend checks its calls through its MPI bootstrap group with it.
  std::vector<CollectiveCall> exchange_calls_bounded(const CollectiveCall& mine, const std::string& what);

 protected:
  WorkPtr do_all_gather(const Tensor& out, const Tensor& in, const CollectiveCall& call) override;
  WorkPtr do_reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op, const CollectiveCall& call) override;
  WorkPtr do_all_gather_coalesced(const std::vector<Tensor>& outs, const std::vector<Tensor>& ins,
                                  const CollectiveCall& call) override;
  WorkPtr do_reduce_scatter_coalesced(const std::vector<Tensor>& outs, const std::vector<Tensor>& ins, ReduceOp op,
                                      const CollectiveCall& call) override;
  WorkPtr do_all_reduce(const Tensor& t, ReduceOp op, const CollectiveCall& call) override;
  WorkPtr do_broadcast(const Tensor& t, int root, const CollectiveCall& call) override;
  WorkPtr do_all_to_all(const Tensor& out, const Tensor& in, const std::vector<int64_t>& out_counts,
                        const std::vector<int64_t>& in_counts, const CollectiveCall& call) override;
  WorkPtr do_barrier(const CollectiveCall& call) override;
  WorkPtr do_send(const Tensor& t, int dst, int tag, const CollectiveCall& call) override;
  WorkPtr do_recv(const Tensor& t, int src, int tag, const CollectiveCall& call) override;
  std::shared_ptr<ProcessGroup> do_split(int color, int key, std::string name) override;
  std::vector<CollectiveCall> exchange_calls(const CollectiveCall& mine) override;
  void check_device(const Tensor& t, std::string_view op) const override;

 private:
  MpiProcessGroup(MPI_Comm comm, int rank, std::vector<int> global_ranks, bool one_node, std::string name);

  MPI_Comm comm_;
  bool one_node_;  // every rank on this node (shared memory), as MPI_COMM_TYPE_SHARED says
};

}  // namespace dtr::mesh::mpi
