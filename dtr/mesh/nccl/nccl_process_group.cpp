#include "dtr/mesh/nccl/nccl_process_group.h"

#include "dtr/base/error.h"
#include "dtr/base/log.h"
#include "dtr/mesh/mpi/mpi_types.h"
#include "dtr/mesh/nccl/nccl_check.h"
#include "dtr/mesh/nccl/nccl_communicator.h"
#include "dtr/mesh/nccl/nccl_types.h"
#include "dtr/mesh/nccl/nccl_work.h"
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/cuda/cuda_allocator.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#include "dtr/tensor/factory.h"

#include <nccl.h>

#include <cstring>

namespace dtr::mesh::nccl {

struct NcclProcessGroup::Impl {
  std::shared_ptr<mpi::MpiProcessGroup> bootstrap;
  std::shared_ptr<NcclCommunicator> comm;
  int device = 0;
  cudaStream_t stream = nullptr;  // the group's communication stream (owned by the CUDA runtime)
  std::unique_ptr<cuda::Event> ready;  // re-recorded on the caller's stream before each op
  std::mutex issue_mutex;             // one enqueue at a time
  // While coalescing: the completion every op shares (recorded after
  // ncclGroupEnd), and the premul_sum ops to destroy once the group is launched.
  std::shared_ptr<NcclCompletion> coalesced;
  std::vector<ncclRedOp_t> deferred_ops;

  ncclComm_t nccl() const { return comm->get(); }

  // Destroys a premul_sum op once its collective is enqueued (after ncclGroupEnd
  // when coalescing, since the group launches only then).
  void release(const NcclReduction& reduction) {
    if (!reduction.created) return;
    if (coalesced) {
      deferred_ops.push_back(reduction.op);
    } else {
      DTR_NCCL_CHECK(ncclRedOpDestroy(reduction.op, nccl()));
    }
  }
};

namespace {

char* bytes_of(const Tensor& t) { return static_cast<char*>(t.raw_data()); }

size_t count_of(const Tensor& t) { return static_cast<size_t>(t.numel()); }

// Declares that `t`'s memory is used by work on `stream`, so that the caching
// allocator does not hand it out again before that work is done.
void record_on_stream(const Tensor& t, cudaStream_t stream) {
  if (!t.defined() || t.storage().nbytes() == 0 || t.storage().data() == nullptr) return;
  if (auto* caching = dynamic_cast<cuda::CudaCachingAllocator*>(&get_allocator(t.device()))) {
    caching->record_stream(t.storage().data(), stream);
  }
}

}  // namespace

std::shared_ptr<ProcessGroup> create_nccl_group(const std::shared_ptr<mpi::MpiProcessGroup>& bootstrap,
                                                std::string name) {
  DTR_CHECK(bootstrap != nullptr, "create_nccl_group '{}': no bootstrap MPI group", name);
  DTR_CHECK(cuda::device_count() > 0, "create_nccl_group '{}': the NCCL backend needs a CUDA device, found none",
            name);
  const int device = cuda::current_device();
  // Rank 0 makes the id; the others get it over MPI.
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  Tensor id_bytes = zeros({static_cast<int64_t>(sizeof(ncclUniqueId))}, {.dtype = DType::u8, .device = Device::cpu()});
  if (bootstrap->rank() == 0) {
    DTR_NCCL_CHECK(ncclGetUniqueId(&id));
    std::memcpy(id_bytes.raw_data(), &id, sizeof(id));
  }
  bootstrap->broadcast(id_bytes, 0)->wait();
  std::memcpy(&id, id_bytes.raw_data(), sizeof(id));
  ncclComm_t comm = nullptr;
  {
    cuda::DeviceGuard guard(device);
    DTR_NCCL_CHECK(ncclCommInitRank(&comm, bootstrap->size(), id, bootstrap->rank()));
  }
  return std::shared_ptr<NcclProcessGroup>(new NcclProcessGroup(bootstrap, comm, device, std::move(name)));
}

NcclProcessGroup::NcclProcessGroup(std::shared_ptr<mpi::MpiProcessGroup> bootstrap, ncclComm* comm, int device,
                                   std::string name)
    : ProcessGroup(bootstrap->rank(), bootstrap->global_ranks(), std::move(name)), impl_(std::make_unique<Impl>()) {
  impl_->bootstrap = std::move(bootstrap);
  impl_->device = device;
  // Owned from here on, even if what follows throws.
  impl_->comm = std::make_shared<NcclCommunicator>(comm, device, describe());
  impl_->stream = cuda::create_stream(device);
  cuda::DeviceGuard guard(device);
  impl_->ready = std::make_unique<cuda::Event>();
}

NcclProcessGroup::~NcclProcessGroup() {
  // A coalescing block that never ended: its premul_sum ops are still ours.
  if (!impl_->deferred_ops.empty() && !impl_->comm->aborted()) {
    for (ncclRedOp_t op : impl_->deferred_ops) ncclRedOpDestroy(op, impl_->nccl());
  }
  // The communicator is destroyed (ncclCommDestroy, unless aborted) when the last
  // Work issued on it is gone too.
}

int NcclProcessGroup::device() const { return impl_->device; }

const std::shared_ptr<mpi::MpiProcessGroup>& NcclProcessGroup::bootstrap() const { return impl_->bootstrap; }

void NcclProcessGroup::check_device(const Tensor& t, std::string_view op) const {
  DTR_CHECK(t.device().is_cuda() && t.device().index == impl_->device,
            "{} on group {}: the NCCL backend takes tensors on cuda:{} (the group's device), got a tensor on {}", op,
            describe(), impl_->device, t.device());
}

WorkPtr NcclProcessGroup::launch(const CollectiveCall& call, std::vector<Tensor> tensors,
                                 const std::function<void(Impl&)>& issue, bool blocking_wait) {
  Impl& impl = *impl_;
  cuda::DeviceGuard guard(impl.device);
  std::lock_guard lock(impl.issue_mutex);
  // The inputs are ready once the caller's stream gets here.
  impl.ready->record(cuda::current_stream(impl.device));
  impl.ready->wait(impl.stream);
  issue(impl);
  for (const Tensor& t : tensors) record_on_stream(t, impl.stream);
  std::shared_ptr<NcclCompletion> completion = impl.coalesced;  // recorded by end_coalescing
  if (!completion) {
    completion = std::make_shared<NcclCompletion>(impl.device);
    completion->record(impl.stream);
  }
  return std::make_shared<NcclWork>(describe(call), impl.comm, std::move(completion), std::move(tensors),
                                    blocking_wait);
}

WorkPtr NcclProcessGroup::do_all_gather(const Tensor& out, const Tensor& in, const CollectiveCall& call) {
  return launch(call, {out, in}, [&](Impl& impl) {
    if (in.numel() == 0) return;
    DTR_NCCL_CHECK(ncclAllGather(in.raw_data(), out.raw_data(), count_of(in), nccl_datatype(in.dtype()),
                                 impl.nccl(), impl.stream));
  });
}

WorkPtr NcclProcessGroup::do_reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op,
                                            const CollectiveCall& call) {
  const std::string what = describe(call);
  return launch(call, {out, in}, [&](Impl& impl) {
    NcclReduction reduction = make_nccl_reduction(op, in.dtype(), impl.nccl(), what);
    ncclResult_t status = ncclSuccess;
    if (out.numel() > 0) {
      status = ncclReduceScatter(in.raw_data(), out.raw_data(), count_of(out), nccl_datatype(in.dtype()),
                                 reduction.op, impl.nccl(), impl.stream);
    }
    impl.release(reduction);
    DTR_NCCL_CHECK(status);
  });
}

WorkPtr NcclProcessGroup::do_all_reduce(const Tensor& t, ReduceOp op, const CollectiveCall& call) {
  const std::string what = describe(call);
  return launch(call, {t}, [&](Impl& impl) {
    NcclReduction reduction = make_nccl_reduction(op, t.dtype(), impl.nccl(), what);
    ncclResult_t status = ncclSuccess;
    if (t.numel() > 0) {
      status = ncclAllReduce(t.raw_data(), t.raw_data(), count_of(t), nccl_datatype(t.dtype()), reduction.op,
                             impl.nccl(), impl.stream);
    }
    impl.release(reduction);
    DTR_NCCL_CHECK(status);
  });
}

WorkPtr NcclProcessGroup::do_broadcast(const Tensor& t, int root, const CollectiveCall& call) {
  return launch(call, {t}, [&](Impl& impl) {
    if (t.numel() == 0) return;
    DTR_NCCL_CHECK(ncclBroadcast(t.raw_data(), t.raw_data(), count_of(t), nccl_datatype(t.dtype()), root,
                                 impl.nccl(), impl.stream));
  });
}

WorkPtr NcclProcessGroup::do_all_to_all(const Tensor& out, const Tensor& in, const std::vector<int64_t>& out_counts,
                                        const std::vector<int64_t>& in_counts, const CollectiveCall& call) {
  return launch(call, {out, in}, [&](Impl& impl) {
    const ncclDataType_t type = nccl_datatype(in.dtype());
    const size_t element = element_size(in.dtype());
    // One NCCL group of a send and a receive per peer; empty parts are skipped on
    // both sides (the peers' splits agree).
    DTR_NCCL_CHECK(ncclGroupStart());
    ncclResult_t status = ncclSuccess;
    size_t send_offset = 0, recv_offset = 0;
    for (int r = 0; r < size() && status == ncclSuccess; ++r) {
      const auto send_count = static_cast<size_t>(in_counts[r]);
      const auto recv_count = static_cast<size_t>(out_counts[r]);
      if (send_count > 0) {
        status = ncclSend(bytes_of(in) + send_offset * element, send_count, type, r, impl.nccl(), impl.stream);
      }
      if (recv_count > 0 && status == ncclSuccess) {
        status = ncclRecv(bytes_of(out) + recv_offset * element, recv_count, type, r, impl.nccl(), impl.stream);
      }
      send_offset += send_count;
      recv_offset += recv_count;
    }
    ncclResult_t end = ncclGroupEnd();
    DTR_NCCL_CHECK(status);
    DTR_NCCL_CHECK(end);
  });
}

WorkPtr NcclProcessGroup::do_barrier(const CollectiveCall& call) {
  // A one-element all-reduce; its Work blocks the host in wait().
  Tensor token;
  {
    cuda::DeviceGuard guard(impl_->device);
    token = zeros({1}, {.dtype = DType::f32, .device = Device::cuda(impl_->device)});
  }
  return launch(
      call, {token},
      [&](Impl& impl) {
        DTR_NCCL_CHECK(ncclAllReduce(token.raw_data(), token.raw_data(), 1, ncclFloat32, ncclSum, impl.nccl(),
                                     impl.stream));
      },
      /*blocking_wait=*/true);
}

WorkPtr NcclProcessGroup::do_send(const Tensor& t, int dst, int /*tag*/, const CollectiveCall& call) {
  return launch(call, {t}, [&](Impl& impl) {
    if (t.numel() == 0) return;
    DTR_NCCL_CHECK(ncclSend(t.raw_data(), count_of(t), nccl_datatype(t.dtype()), dst, impl.nccl(), impl.stream));
  });
}

WorkPtr NcclProcessGroup::do_recv(const Tensor& t, int src, int /*tag*/, const CollectiveCall& call) {
  return launch(call, {t}, [&](Impl& impl) {
    if (t.numel() == 0) return;
    DTR_NCCL_CHECK(ncclRecv(t.raw_data(), count_of(t), nccl_datatype(t.dtype()), src, impl.nccl(), impl.stream));
  });
}

void NcclProcessGroup::do_start_coalescing() {
  Impl& impl = *impl_;
  std::lock_guard lock(impl.issue_mutex);
  DTR_INTERNAL_ASSERT(!impl.coalesced, "NCCL group {}: coalescing started twice", describe());
  auto completion = std::make_shared<NcclCompletion>(impl.device);
  DTR_NCCL_CHECK(ncclGroupStart());
  impl.coalesced = std::move(completion);
}

void NcclProcessGroup::do_end_coalescing() {
  Impl& impl = *impl_;
  cuda::DeviceGuard guard(impl.device);
  std::lock_guard lock(impl.issue_mutex);
  DTR_INTERNAL_ASSERT(impl.coalesced != nullptr, "NCCL group {}: end_coalescing without start", describe());
  // NCCL launches the coalesced operations here, so their event goes after it.
  ncclResult_t status = ncclGroupEnd();
  std::vector<ncclRedOp_t> ops;
  ops.swap(impl.deferred_ops);
  std::shared_ptr<NcclCompletion> completion = std::move(impl.coalesced);
  impl.coalesced = nullptr;
  for (ncclRedOp_t op : ops) ncclRedOpDestroy(op, impl.nccl());
  // Recorded even when the launch failed, so that the Works do not wait forever.
  completion->record(impl.stream);
  DTR_NCCL_CHECK(status);
}

std::shared_ptr<ProcessGroup> NcclProcessGroup::do_split(int color, int key, std::string name) {
  // Both splits order the new members by (key, rank), so their ranks agree.
  auto child_bootstrap = std::static_pointer_cast<mpi::MpiProcessGroup>(impl_->bootstrap->split(color, key, name));
  ncclComm_t child = nullptr;
  {
    cuda::DeviceGuard guard(impl_->device);
    std::lock_guard lock(impl_->issue_mutex);
    DTR_NCCL_CHECK(ncclCommSplit(impl_->nccl(), color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, nullptr));
  }
  if (color < 0) {
    DTR_INTERNAL_ASSERT(child == nullptr && child_bootstrap == nullptr,
                        "split of {} with a negative color made a group", describe());
    return nullptr;
  }
  DTR_INTERNAL_ASSERT(child != nullptr && child_bootstrap != nullptr, "split of {} with color {} made no group",
                      describe(), color);
  int child_rank = -1;
  ncclResult_t status = ncclCommUserRank(child, &child_rank);
  if (status != ncclSuccess || child_rank != child_bootstrap->rank()) {
    ncclCommDestroy(child);
    DTR_NCCL_CHECK(status);
    DTR_INTERNAL_ASSERT(false, "split '{}' of {}: NCCL rank {} differs from the MPI rank {}", name, describe(),
                        child_rank, child_bootstrap->rank());
  }
  return std::shared_ptr<NcclProcessGroup>(
      new NcclProcessGroup(std::move(child_bootstrap), child, impl_->device, std::move(name)));
}

// Through the MPI bootstrap group (the same ranks in the same order), point to
// point and under the collective timeout, as the MPI backend checks its own calls.
std::vector<CollectiveCall> NcclProcessGroup::exchange_calls(const CollectiveCall& mine) {
  return impl_->bootstrap->exchange_calls_bounded(mine, describe(mine));
}

}  // namespace dtr::mesh::nccl
