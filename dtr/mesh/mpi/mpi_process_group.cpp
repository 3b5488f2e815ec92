#include "dtr/mesh/mpi/mpi_process_group.h"

#include "dtr/base/error.h"
#include "dtr/mesh/mpi/host_staging.h"
#include "dtr/mesh/mpi/mpi_progress.h"
#include "dtr/mesh/mpi/mpi_types.h"
#include "dtr/mesh/watchdog.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>

namespace dtr::mesh::mpi {

namespace {

int mpi_count(int64_t count, const std::string& what) {
  DTR_CHECK(count <= INT_MAX, "{}: {} elements exceed what one MPI call can move ({}); split the tensor", what,
            count, INT_MAX);
  return static_cast<int>(count);
}

std::vector<int> world_ranks_of(MPI_Comm comm) {
  MPI_Group group, world;
  DTR_MPI_CHECK(MPI_Comm_group(comm, &group));
  DTR_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  int size = 0;
  DTR_MPI_CHECK(MPI_Group_size(group, &size));
  std::vector<int> local(size), global(size);
  std::iota(local.begin(), local.end(), 0);
  DTR_MPI_CHECK(MPI_Group_translate_ranks(group, size, local.data(), world, global.data()));
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return global;
}

// True when every rank of `comm` shares this node's memory. Collective over comm.
bool on_one_node(MPI_Comm comm) {
  MPI_Comm node;
  DTR_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int node_size = 0, size = 0;
  DTR_MPI_CHECK(MPI_Comm_size(node, &node_size));
  DTR_MPI_CHECK(MPI_Comm_size(comm, &size));
  MPI_Comm_free(&node);
  return node_size == size;
}

// What avg adds after MPI's sum: the division by the group size (nothing for
// other ops).
std::function<void()> avg_division(ReduceOp op, void* data, int64_t count, DType dtype, int size) {
  if (op.kind != ReduceOp::Kind::avg) return {};
  return [=] { divide_in_place(data, count, dtype, size); };
}

// Issues one MPI operation: `issue` starts its requests on host pointers prepared
// through `staging`; `after` runs once they complete (before outputs are copied back).
WorkPtr launch(const std::string& description, HostStaging staging,
               const std::function<void(std::vector<MPI_Request>&)>& issue, std::function<void()> after = {}) {
  auto shared_staging = std::make_shared<HostStaging>(std::move(staging));
  auto finish = [shared_staging, after = std::move(after)] {
    if (after) after();
    shared_staging->copy_back();
  };
  auto keep = shared_staging->keep_alive();
  auto work = std::make_shared<MpiWork>(description, std::move(finish), std::move(keep));
  ProgressEngine::instance().submit(work, issue);
  return work;
}

// Where one output of a reduce-scatter goes: `count` elements at `offset` in each
// rank's chunks. `own`, when set, is this rank's contribution where it lies (its
// rows of the caller's input), read in place of its own chunk.
struct ChunkSlice {
  void* out;
  int64_t offset;
  int64_t count;
  const void* own = nullptr;
};

// Combines every rank's chunks (`size` back to back, `chunk_numel` elements each)
// into the slices' outputs, in rank order: contributions scaled first for
// premul_sum (which needs every contribution in `chunks`, to scale in place), the
// sum divided last for avg.
void combine_chunks(char* chunks, int64_t chunk_numel, DType dtype, ReduceOp op, int size, int rank,
                    const std::vector<ChunkSlice>& slices) {
  const size_t element = element_size(dtype);
  const size_t bytes = static_cast<size_t>(chunk_numel) * element;
  if (bytes == 0) return;
  auto chunk = [&](int r) { return chunks + static_cast<size_t>(r) * bytes; };
  if (op.kind == ReduceOp::Kind::premul_sum) {
    for (int r = 0; r < size; ++r) scale_in_place(chunk(r), chunk_numel, dtype, op.factor);
  }
  for (const ChunkSlice& slice : slices) {
    if (slice.count == 0) continue;
    const size_t offset = static_cast<size_t>(slice.offset) * element;
    auto contribution = [&](int r) -> const void* {
      return r == rank && slice.own != nullptr ? slice.own : chunk(r) + offset;
    };
    std::memcpy(slice.out, contribution(0), static_cast<size_t>(slice.count) * element);
    for (int r = 1; r < size; ++r) combine_in_place(slice.out, contribution(r), slice.count, dtype, op.kind);
    if (op.kind == ReduceOp::Kind::avg) divide_in_place(slice.out, slice.count, dtype, size);
  }
}

bool all_on_cpu(const std::vector<Tensor>& tensors) {
  return std::all_of(tensors.begin(), tensors.end(), [](const Tensor& t) { return t.device().is_cpu(); });
}

// The backend's own tags, above the user's: the coalesced collectives' messages
// (which so match only each other, in the order the ranks issue them: MPI keeps
// the order of messages between two ranks with one tag) and the
// DTR_DEBUG_COLLECTIVES exchange of calls.
constexpr int kCoalescedTag = ProcessGroup::kMaxTag + 1;
constexpr int kExchangeTag = ProcessGroup::kMaxTag + 2;
static_assert(kExchangeTag <= 32767, "32767 is the largest tag every MPI accepts");

// One contiguous block of a coalesced collective's exchange with one peer.
struct Block {
  void* data;
  int count;
};

// Rank r's block of a tensor split into equal blocks of `count` elements.
Block rank_block(char* base, int r, int count, size_t element) {
  return {base + static_cast<size_t>(r) * static_cast<size_t>(count) * element, count};
}

// Posts the messages of a coalesced collective: from every other rank r, a receive
// into each of `recv_block(r, i)`, then to every other rank, a send of each of
// `send_block(r, i)`, for the pairs i < n (empty blocks are skipped on both sides).
// Each block is one contiguous message, so that Open MPI moves it in a single
// copy (within a node, the receiver reads the sender's memory) and a few polls,
// where a derived datatype would make it pack and unpack fragments that need a
// poll each. Peers are visited from the next rank on, so no rank is every rank's
// first.
template <class RecvBlock, class SendBlock>
void post_blocks(MPI_Comm comm, int size, int rank, size_t n, MPI_Datatype type, RecvBlock recv_block,
                 SendBlock send_block, std::vector<MPI_Request>& requests) {
  for (int step = 1; step < size; ++step) {
    const int r = (rank + size - step) % size;
    for (size_t i = 0; i < n; ++i) {
      const Block b = recv_block(r, i);
      if (b.count == 0) continue;
      requests.emplace_back();
      DTR_MPI_CHECK(MPI_Irecv(b.data, b.count, type, r, kCoalescedTag, comm, &requests.back()));
    }
  }
  for (int step = 1; step < size; ++step) {
    const int r = (rank + step) % size;
    for (size_t i = 0; i < n; ++i) {
      const Block b = send_block(r, i);
      if (b.count == 0) continue;
      requests.emplace_back();
      DTR_MPI_CHECK(MPI_Isend(b.data, b.count, type, r, kCoalescedTag, comm, &requests.back()));
    }
  }
}

}  // namespace

std::shared_ptr<MpiProcessGroup> MpiProcessGroup::create(MPI_Comm comm, std::string name) {
  return ProgressEngine::instance().blocking([&] {
    DTR_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    int rank = 0;
    DTR_MPI_CHECK(MPI_Comm_rank(comm, &rank));
    return std::shared_ptr<MpiProcessGroup>(
        new MpiProcessGroup(comm, rank, world_ranks_of(comm), on_one_node(comm), std::move(name)));
  });
}

MpiProcessGroup::MpiProcessGroup(MPI_Comm comm, int rank, std::vector<int> global_ranks, bool one_node,
                                 std::string name)
    : ProcessGroup(rank, std::move(global_ranks), std::move(name)), comm_(comm), one_node_(one_node) {}

MpiProcessGroup::~MpiProcessGroup() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) {
    ProgressEngine::instance().blocking([&] { MPI_Comm_free(&comm_); });
  }
}

void MpiProcessGroup::check_device(const Tensor& t, std::string_view op) const {
  DTR_CHECK(t.device().is_cpu() || t.device().is_cuda(),
            "{} on group {}: the MPI backend takes cpu or cuda tensors (cuda staged through host memory), got {}",
            op, describe(), t.device());
}

WorkPtr MpiProcessGroup::do_all_gather(const Tensor& out, const Tensor& in, const CollectiveCall& call) {
  const std::string description = describe(call);
  HostStaging staging;
  void* send = staging.input(in);
  void* recv = staging.output(out, /*in_place=*/false);
  int count = mpi_count(in.numel(), description);
  MPI_Datatype type = mpi_datatype(in.dtype());
  return launch(description, std::move(staging), [=, this](std::vector<MPI_Request>& requests) {
    requests.emplace_back();
    DTR_MPI_CHECK(MPI_Iallgather(send, count, type, recv, count, type, comm_, &requests.back()));
  });
}

WorkPtr MpiProcessGroup::do_reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op,
                                           const CollectiveCall& call) {
  const std::string description = describe(call);
  HostStaging staging;
  void* send = staging.input(in);
  if (size() == 1) {
    // One rank: the result is its own contribution (scaled for premul_sum; avg divides
    // by 1), so one copy does it, without MPI's pass or a scratch buffer for the scaling.
    void* recv = staging.output(out, /*in_place=*/false);
    const double factor = op.kind == ReduceOp::Kind::premul_sum ? op.factor : 1.0;
    return launch(description, std::move(staging),
                  [=, n = out.numel(), dtype = out.dtype(), nbytes = out.nbytes()](std::vector<MPI_Request>&) {
                    if (nbytes == 0) return;  // empty tensors may have no storage at all
                    std::memcpy(recv, send, nbytes);
                    if (factor != 1.0) scale_in_place(recv, n, dtype, factor);
                  });
  }
  const int count = mpi_count(out.numel(), description);
  const MPI_Datatype type = mpi_datatype(in.dtype());
  if (!one_node_) {
    // Across nodes MPI's algorithm sends each byte over the network fewer times
    // than an all-to-all does (a ring: (N-1)/N of the input per rank).
    if (op.kind == ReduceOp::Kind::premul_sum) {
      // Scale a copy: the caller's input must not change.
      void* scaled = staging.scratch(in.nbytes());
      std::memcpy(scaled, send, in.nbytes());
      scale_in_place(scaled, in.numel(), in.dtype(), op.factor);
      send = scaled;
    }
    void* recv = staging.output(out, /*in_place=*/false);
    const MPI_Op mop = mpi_op(op, in.dtype());
    return launch(
        description, std::move(staging),
        [=, this](std::vector<MPI_Request>& requests) {
          requests.emplace_back();
          DTR_MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, count, type, mop, comm_, &requests.back()));
        },
        avg_division(op, recv, out.numel(), out.dtype(), size()));
  }
  // Within a node, Open MPI's reduce_scatter_block moves and sums large buffers
  // 2.5-4x slower than an all-to-all of the chunks followed by a local combine
  // (4-64 MB over shared memory, 2 and 3 ranks), so each rank receives every
  // rank's chunk for it and combines them itself.
  void* recv = staging.output(out, /*in_place=*/false);
  char* chunks = static_cast<char*>(staging.scratch(in.nbytes()));
  auto combine = [recv, chunks, op, n = out.numel(), dtype = out.dtype(), size = size(), me = rank()] {
    combine_chunks(chunks, n, dtype, op, size, me, {{recv, 0, n}});
  };
  return launch(
      description, std::move(staging),
      [=, this](std::vector<MPI_Request>& requests) {
        requests.emplace_back();
        DTR_MPI_CHECK(MPI_Ialltoall(send, count, type, chunks, count, type, comm_, &requests.back()));
      },
      std::move(combine));
}

// Every rank sends each input, as one message, to every other rank, which receives
// it into its place in the output; the rank's own block is copied in place. Nothing
// is copied into or out of a flat buffer.
WorkPtr MpiProcessGroup::do_all_gather_coalesced(const std::vector<Tensor>& outs, const std::vector<Tensor>& ins,
                                                 const CollectiveCall& call) {
  if (!all_on_cpu(ins)) return ProcessGroup::do_all_gather_coalesced(outs, ins, call);
  const std::string description = describe(call);
  const size_t n = ins.size();
  const size_t element = element_size(ins.front().dtype());
  HostStaging staging;
  std::vector<char*> in_bases(n), out_bases(n);
  std::vector<int> counts(n);
  for (size_t i = 0; i < n; ++i) {
    in_bases[i] = static_cast<char*>(staging.input(ins[i]));
    out_bases[i] = static_cast<char*>(staging.output(outs[i], /*in_place=*/false));
    counts[i] = mpi_count(ins[i].numel(), description);
  }
  auto block_of = [=](int r, size_t i) { return rank_block(out_bases[i], r, counts[i], element); };
  for (size_t i = 0; i < n; ++i) {
    if (counts[i] > 0) std::memcpy(block_of(rank(), i).data, in_bases[i], static_cast<size_t>(counts[i]) * element);
  }
  const MPI_Datatype type = mpi_datatype(ins.front().dtype());
  return launch(description, std::move(staging), [=, this](std::vector<MPI_Request>& requests) {
    post_blocks(
        comm_, size(), rank(), n, type, block_of, [&](int, size_t i) { return Block{in_bases[i], counts[i]}; },
        requests);
  });
}

// Within a node, as do_reduce_scatter: every rank sends rank r, as one message per
// input, its chunk of that input, and receives every rank's chunks for this rank
// back to back into one scratch buffer, which is then combined (with this rank's
// own chunks read where they lie) into the outputs.
WorkPtr MpiProcessGroup::do_reduce_scatter_coalesced(const std::vector<Tensor>& outs, const std::vector<Tensor>& ins,
                                                     ReduceOp op, const CollectiveCall& call) {
  if (!all_on_cpu(ins) || size() == 1 || !one_node_) {
    return ProcessGroup::do_reduce_scatter_coalesced(outs, ins, op, call);
  }
  const std::string description = describe(call);
  const size_t n = ins.size();
  const DType dtype = ins.front().dtype();
  const size_t element = element_size(dtype);
  const int me = rank();
  HostStaging staging;
  std::vector<char*> in_bases(n);
  std::vector<int> counts(n);
  std::vector<ChunkSlice> slices(n);
  int64_t chunk_numel = 0;
  for (size_t i = 0; i < n; ++i) {
    in_bases[i] = static_cast<char*>(staging.input(ins[i]));
    counts[i] = mpi_count(outs[i].numel(), description);
    slices[i] = {staging.output(outs[i], /*in_place=*/false), chunk_numel, outs[i].numel()};
    chunk_numel += outs[i].numel();
  }
  char* chunks = static_cast<char*>(staging.scratch(static_cast<size_t>(size() * chunk_numel) * element));
  auto rows_of = [=](int r, size_t i) { return rank_block(in_bases[i], r, counts[i], element); };
  auto chunk_of = [=](int r, size_t i) {
    return Block{chunks + static_cast<size_t>(r * chunk_numel + slices[i].offset) * element, counts[i]};
  };
  for (size_t i = 0; i < n; ++i) {
    if (op.kind != ReduceOp::Kind::premul_sum) {
      slices[i].own = rows_of(me, i).data;
    } else if (counts[i] > 0) {  // scaled in place with the others, so copied out of the input
      std::memcpy(chunk_of(me, i).data, rows_of(me, i).data, static_cast<size_t>(counts[i]) * element);
    }
  }
  const MPI_Datatype type = mpi_datatype(dtype);
  auto combine = [=, size = size()] { combine_chunks(chunks, chunk_numel, dtype, op, size, me, slices); };
  return launch(
      description, std::move(staging),
      [=, this](std::vector<MPI_Request>& requests) {
        post_blocks(comm_, size(), me, n, type, chunk_of, rows_of, requests);
      },
      std::move(combine));
}

WorkPtr MpiProcessGroup::do_all_reduce(const Tensor& t, ReduceOp op, const CollectiveCall& call) {
  const std::string description = describe(call);
  HostStaging staging;
  void* data = staging.output(t, /*in_place=*/true);
  if (op.kind == ReduceOp::Kind::premul_sum) scale_in_place(data, t.numel(), t.dtype(), op.factor);
  int count = mpi_count(t.numel(), description);
  MPI_Datatype type = mpi_datatype(t.dtype());
  MPI_Op mop = mpi_op(op, t.dtype());
  return launch(
      description, std::move(staging),
      [=, this](std::vector<MPI_Request>& requests) {
        requests.emplace_back();
        DTR_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, count, type, mop, comm_, &requests.back()));
      },
      avg_division(op, data, t.numel(), t.dtype(), size()));
}

WorkPtr MpiProcessGroup::do_broadcast(const Tensor& t, int root, const CollectiveCall& call) {
  const std::string description = describe(call);
  HostStaging staging;
  void* data = rank() == root ? staging.input(t) : staging.output(t, /*in_place=*/false);
  int count = mpi_count(t.numel(), description);
  MPI_Datatype type = mpi_datatype(t.dtype());
  return launch(description, std::move(staging), [=, this](std::vector<MPI_Request>& requests) {
    requests.emplace_back();
    DTR_MPI_CHECK(MPI_Ibcast(data, count, type, root, comm_, &requests.back()));
  });
}

WorkPtr MpiProcessGroup::do_all_to_all(const Tensor& out, const Tensor& in, const std::vector<int64_t>& out_counts,
                                       const std::vector<int64_t>& in_counts, const CollectiveCall& call) {
  const std::string description = describe(call);
  HostStaging staging;
  void* send = staging.input(in);
  void* recv = staging.output(out, /*in_place=*/false);
  MPI_Datatype type = mpi_datatype(in.dtype());
  // Counts and displacements must outlive the non-blocking call.
  auto counts = std::make_shared<std::vector<int>>(4 * size());
  int* send_counts = counts->data();
  int* send_displs = send_counts + size();
  int* recv_counts = send_displs + size();
  int* recv_displs = recv_counts + size();
  int64_t send_offset = 0, recv_offset = 0;
  for (int r = 0; r < size(); ++r) {
    send_counts[r] = mpi_count(in_counts[r], description);
    recv_counts[r] = mpi_count(out_counts[r], description);
    send_displs[r] = mpi_count(send_offset, description);
    recv_displs[r] = mpi_count(recv_offset, description);
    send_offset += in_counts[r];
    recv_offset += out_counts[r];
  }
  staging.keep(counts);
  return launch(description, std::move(staging), [=, this](std::vector<MPI_Request>& requests) {
    requests.emplace_back();
    DTR_MPI_CHECK(MPI_Ialltoallv(send, send_counts, send_displs, type, recv, recv_counts, recv_displs, type, comm_,
                                 &requests.back()));
  });
}

WorkPtr MpiProcessGroup::do_barrier(const CollectiveCall& call) {
  return launch(describe(call), HostStaging{}, [this](std::vector<MPI_Request>& requests) {
    requests.emplace_back();
    DTR_MPI_CHECK(MPI_Ibarrier(comm_, &requests.back()));
  });
}

WorkPtr MpiProcessGroup::do_send(const Tensor& t, int dst, int tag, const CollectiveCall& call) {
  const std::string description = describe(call);
  HostStaging staging;
  void* data = staging.input(t);
  int count = mpi_count(t.numel(), description);
  MPI_Datatype type = mpi_datatype(t.dtype());
  return launch(description, std::move(staging), [=, this](std::vector<MPI_Request>& requests) {
    requests.emplace_back();
    DTR_MPI_CHECK(MPI_Isend(data, count, type, dst, tag, comm_, &requests.back()));
  });
}

WorkPtr MpiProcessGroup::do_recv(const Tensor& t, int src, int tag, const CollectiveCall& call) {
  const std::string description = describe(call);
  HostStaging staging;
  void* data = staging.output(t, /*in_place=*/false);
  int count = mpi_count(t.numel(), description);
  MPI_Datatype type = mpi_datatype(t.dtype());
  return launch(description, std::move(staging), [=, this](std::vector<MPI_Request>& requests) {
    requests.emplace_back();
    DTR_MPI_CHECK(MPI_Irecv(data, count, type, src, tag, comm_, &requests.back()));
  });
}

std::shared_ptr<ProcessGroup> MpiProcessGroup::do_split(int color, int key, std::string name) {
  MPI_Comm child = MPI_COMM_NULL;
  ProgressEngine::instance().blocking([&] {
    DTR_MPI_CHECK(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &child));
  });
  if (child == MPI_COMM_NULL) return nullptr;
  return create(child, std::move(name));
}

std::vector<CollectiveCall> MpiProcessGroup::exchange_calls(const CollectiveCall& mine) {
  return exchange_calls_bounded(mine, describe(mine));
}

// Point to point with every other member, polled under the MPI lock: the exchange
// runs before its collective exists, so the watchdog cannot see it, and a blocking
// all-gather would wait forever for a member that never arrives. Past the
// collective timeout the process ends naming the members whose call never came.

std::vector<CollectiveCall> MpiProcessGroup::exchange_calls_bounded(const CollectiveCall& mine,
                                                                    const std::string& what) {
  const int n = size(), me = rank();
  std::vector<CollectiveCall> all(n);
  all[me] = mine;
  std::vector<MPI_Request> recvs(n, MPI_REQUEST_NULL), sends(n, MPI_REQUEST_NULL);
  ProgressEngine& engine = ProgressEngine::instance();
  engine.blocking([&] {
    for (int r = 0; r < n; ++r) {  // a peer posts its receive from us before its send to us
      if (r == me) continue;
      DTR_MPI_CHECK(MPI_Irecv(&all[r], sizeof(CollectiveCall), MPI_BYTE, r, kExchangeTag, comm_, &recvs[r]));
      DTR_MPI_CHECK(MPI_Isend(&all[me], sizeof(CollectiveCall), MPI_BYTE, r, kExchangeTag, comm_, &sends[r]));
    }
  });
  const auto start = std::chrono::steady_clock::now();
  const auto timeout = collective_timeout();
  for (;;) {
    std::vector<int> missing;
    engine.blocking([&] {
      for (int r = 0; r < n; ++r) {
        int done = 1;
        if (recvs[r] != MPI_REQUEST_NULL) DTR_MPI_CHECK(MPI_Test(&recvs[r], &done, MPI_STATUS_IGNORE));
        if (!done) missing.push_back(r);
      }
    });
    if (missing.empty()) break;
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited > timeout) {
      std::vector<std::string> names;
      for (int r : missing) names.push_back(fmt::format("rank {} (world rank {})", r, global_ranks()[r]));
      end_on_timeout(fmt::format(
          "collective timed out: the DTR_DEBUG_COLLECTIVES check before {} waited {:.1f} s "
          "(DTR_COLLECTIVE_TIMEOUT={:.1f} s) for {}, which never arrived: a rank that died, hangs, "
          "or issued different collectives on this group; ending the process",
          what, std::chrono::duration<double>(waited).count(),
          std::chrono::duration<double>(timeout).count(), fmt::join(names, ", ")));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  // Every peer has posted its receive from us (it did before sending to us): our sends complete.
  engine.blocking([&] { DTR_MPI_CHECK(MPI_Waitall(n, sends.data(), MPI_STATUSES_IGNORE)); });
  return all;
}

}  // namespace dtr::mesh::mpi
