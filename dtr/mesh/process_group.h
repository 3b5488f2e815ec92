// ProcessGroup: a set of ranks that run collectives together, with asynchronous
// Work handles. Backends: MPI (mesh/mpi/, CPU tensors, CUDA tensors staged through
// pinned host memory) and NCCL (mesh/nccl/, CUDA tensors).
//
// The public calls validate their arguments (same dtype and device, sizes that fit
// the group, contiguous outputs), number every collective with a per-group
// sequence number, count bytes, optionally check the ranks agree
// (DTR_DEBUG_COLLECTIVES=1), register the call with the timeout watchdog and then
// hand it to the backend. Inputs that are not contiguous are copied; outputs and
// in-place tensors must be contiguous (an error says so).
//
// Profiling (dtr/tensor/profiler.h): each public call records a "comm" span named
// after the collective (its issue: checks, the input copy, the backend's launch;
// args bytes, seq and group), and labels the Work so that its wait() records
// the wait and the in-flight interval (dtr/mesh/work.h).
//
// Like MPI and NCCL, every member must issue the same collectives on a group in
// the same order. Group creation (split) is itself collective over the parent.
#pragma once

#include "dtr/mesh/collective.h"
#include "dtr/mesh/comm_stats.h"
#include "dtr/mesh/reduce_op.h"
#include "dtr/mesh/work.h"
#include "dtr/tensor/profiler.h"
#include "dtr/tensor/tensor.h"

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dtr::mesh {

class ProcessGroup : public std::enable_shared_from_this<ProcessGroup> {
 public:
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(global_ranks_.size()); }
  const std::string& name() const { return name_; }
  // The world rank of each member, in group-rank order.
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  virtual std::string_view backend() const = 0;  // "mpi", "nccl"

  // out (size * in.numel() elements, rank r's input at offset r * in.numel()) =
  // every rank's `in`, in rank order.
  WorkPtr all_gather_into_tensor(const Tensor& out, const Tensor& in);
  // out (in.numel() / size elements) = chunk `rank` of the reduction of every rank's `in`.
  WorkPtr reduce_scatter_tensor(const Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::sum());
  // Coalesced: for every i, outs[i] = every rank's ins[i] as all_gather_into_tensor
  // gives it, and for reduce_scatter, outs[i] = chunk `rank` of the reduction of every
  // rank's ins[i]; one collective and one Work for all pairs, which must share a
  // dtype and device. The MPI backend moves CPU tensors with no flat buffer to
  // copy into or out of, as one message per tensor and peer: an all-gather
  // straight between the caller's tensors, a reduce-scatter within a node from
  // the inputs into one scratch buffer that it sums into the outputs. Other cases
  // issue one collective per pair, coalesced.
  WorkPtr all_gather_into_tensor_coalesced(const std::vector<Tensor>& outs, const std::vector<Tensor>& ins);
  WorkPtr reduce_scatter_tensor_coalesced(const std::vector<Tensor>& outs, const std::vector<Tensor>& ins,
                                          ReduceOp op = ReduceOp::sum());
  // In place: t = the reduction of every rank's t.
  WorkPtr all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum());
  // In place: t = root's t (root is a rank of this group).
  WorkPtr broadcast(const Tensor& t, int root);
  // Splits `in` along dim 0 into `size` parts (equal when in_splits is empty, else
  // in_splits[r] rows for rank r) and sends part r to rank r; out receives rank r's
  // part for this rank at row offset sum(out_splits[0..r)).
  WorkPtr all_to_all_single(const Tensor& out, const Tensor& in, std::vector<int64_t> out_splits = {},
                            std::vector<int64_t> in_splits = {});
  WorkPtr barrier();
  // Point to point; dst/src are ranks of this group. Not part of the collective
  // sequence and not checked by DTR_DEBUG_COLLECTIVES.
  // Tags are in [0, kMaxTag]; the two above it are the backends' own (the MPI
  // backend's coalesced collectives and DTR_DEBUG_COLLECTIVES exchange; 32767 is
  // the largest tag every MPI accepts).
  static constexpr int kMaxTag = 32765;
  WorkPtr send(const Tensor& t, int dst, int tag = 0);
  WorkPtr recv(const Tensor& t, int src, int tag = 0);

  // Coalescing: collectives issued between start_coalescing() and
  // end_coalescing() are launched together (ncclGroupStart/End on NCCL) and
  // end_coalescing() returns one Work for all of them. Nested calls are an error.
  void start_coalescing();
  WorkPtr end_coalescing();

  // Collective over this group: the members that pass the same color >= 0 form a
  // new group, ordered by (key, rank); a negative color gives nullptr.
  std::shared_ptr<ProcessGroup> split(int color, int key, std::string name);
  // Collective over this group: a new group of the given ranks (of this group, in
  // that order); members not listed get nullptr.
  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks, std::string name);

  // The number of collectives issued so far (the next one gets sequence() + 1).
  int64_t sequence() const;
  CommStats stats() const;
  void reset_stats();

  // "'world' (mpi, rank 1 of 4)".
  std::string describe() const;

 protected:
  ProcessGroup(int rank, std::vector<int> global_ranks, std::string name);

  // Backend hooks, called with validated, contiguous tensors. `call` describes the
  // collective (for Work descriptions and errors).
  virtual WorkPtr do_all_gather(const Tensor& out, const Tensor& in, const CollectiveCall& call) = 0;
  virtual WorkPtr do_reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op,
                                    const CollectiveCall& call) = 0;
  // Pairs validated as above (inputs contiguous). By default one do_all_gather or
  // do_reduce_scatter per pair, between do_start_coalescing and do_end_coalescing
  // unless the caller is already coalescing.
  virtual WorkPtr do_all_gather_coalesced(const std::vector<Tensor>& outs, const std::vector<Tensor>& ins,
                                          const CollectiveCall& call);
  virtual WorkPtr do_reduce_scatter_coalesced(const std::vector<Tensor>& outs, const std::vector<Tensor>& ins,
                                              ReduceOp op, const CollectiveCall& call);
  virtual WorkPtr do_all_reduce(const Tensor& t, ReduceOp op, const CollectiveCall& call) = 0;
  virtual WorkPtr do_broadcast(const Tensor& t, int root, const CollectiveCall& call) = 0;
  // Splits are in elements, already validated (and filled in when equal).
  virtual WorkPtr do_all_to_all(const Tensor& out, const Tensor& in, const std::vector<int64_t>& out_counts,
                                const std::vector<int64_t>& in_counts, const CollectiveCall& call) = 0;
  virtual WorkPtr do_barrier(const CollectiveCall& call) = 0;
  virtual WorkPtr do_send(const Tensor& t, int dst, int tag, const CollectiveCall& call) = 0;
  virtual WorkPtr do_recv(const Tensor& t, int src, int tag, const CollectiveCall& call) = 0;
  virtual void do_start_coalescing() {}
  virtual void do_end_coalescing() {}
  virtual std::shared_ptr<ProcessGroup> do_split(int color, int key, std::string name) = 0;
  // Blocking: every member's record, in rank order (for the desync check).
  virtual std::vector<CollectiveCall> exchange_calls(const CollectiveCall& mine) = 0;
  // Whether this backend can run collectives on tensors of `device`.
  virtual void check_device(const Tensor& t, std::string_view op) const = 0;

  // "all_reduce #3 sum f32 [4, 8] on 'world' (mpi, rank 1 of 4)".
  std::string describe(const CollectiveCall& call) const;

 private:
  // `span` is the call's profiler span: begin_collective adds its arguments,
  // finish_issue labels the Work when it is recording.
  CollectiveCall begin_collective(profiler::Span& span, CollectiveKind kind, const Tensor& input,
                                  const Tensor& output, std::optional<ReduceOp> op = {}, int root = -1);
  // The same for a call already described (its sequence number is assigned here)
  // that moves `payload_bytes`.
  CollectiveCall begin_collective(profiler::Span& span, CollectiveCall call, int64_t payload_bytes);
  // The inputs of a coalesced call's pairs, checked and made contiguous; `gather`:
  // each output holds size() inputs (else each input size() outputs).
  std::vector<Tensor> check_coalesced(const std::vector<Tensor>& outs, const std::vector<Tensor>& ins, bool gather,
                                      std::string_view op) const;
  // Runs `issue_one` for every pair, coalesced, and returns one Work for them.
  WorkPtr issue_each_coalesced(size_t pairs, const std::function<WorkPtr(size_t)>& issue_one,
                               const CollectiveCall& call);
  WorkPtr finish_issue(WorkPtr work, const CollectiveCall& call, const profiler::Span& span);

  int rank_;
  std::vector<int> global_ranks_;
  std::string name_;
  const char* profile_name_;  // name_, interned for the profiler's events

  // What begin_collective counts towards CommStats::sent_*: the ring model's
  // bytes to the next rank, all_to_all's shares for the others, sends by peer.
  void count_sent(const CollectiveCall& call, int64_t payload_bytes);

  mutable std::mutex mutex_;  // guards the fields below
  int64_t sequence_ = 0;
  int64_t p2p_sequence_ = 0;
  CommStats stats_;
  int64_t sent_to_next_ = 0;
  int64_t sent_to_all_others_ = 0;
  std::map<int, int64_t> sent_to_peer_;
  bool coalescing_ = false;
  std::vector<WorkPtr> coalesced_;
};

using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

// What this rank sent in `groups` (a group listed twice is counted once), by the
// link it crossed (CommStats::sent_within_host, sent_across_hosts), e.g. over a
// job's world group and its mesh dims' groups.
struct LinkBytes {
  int64_t within_host = 0, across_hosts = 0;
  LinkBytes operator-(const LinkBytes& o) const { return {within_host - o.within_host, across_hosts - o.across_hosts}; }
};
LinkBytes sent_by_link(const std::vector<ProcessGroupPtr>& groups);

}  // namespace dtr::mesh
