// ProcessGroup collectives on CUDA tensors, at whatever world size mpirun gives:
// the NCCL backend (distributed::world_group(DeviceType::cuda), which needs one
// GPU per rank on the node, so those tests skip with a warning where there are
// fewer), and the MPI backend staging CUDA tensors through host memory (any
// number of ranks on one GPU). Rank r contributes values computed from r, so
// every expected result is a closed form evaluated here, independently of the
// code under test; results are read back on the host after wait().
#include "tests/support/collective_expectations.h"
#include "tests/support/mpi_test_util.h"
#include "dtr/mesh/debug_collectives.h"
#include "dtr/mesh/process_group.h"
#include "dtr/tensor/cuda/cuda_runtime.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>

using namespace dtr;
using dtr::mesh::ReduceOp;
using dtr::testing::tensor_of;
using dtr::testing::contribution;
using dtr::testing::contributions;
using dtr::testing::reduce_expected;
using dtr::testing::values_of;

namespace {

const std::vector<DType> kAllDTypes = {DType::f32, DType::f64, DType::bf16, DType::f16,
                                       DType::i32, DType::i64, DType::u8};

Device gpu() { return Device::cuda(cuda::current_device()); }

// The NCCL world group, or nullptr (after a warning) where this node has fewer
// GPUs than ranks. Every rank of a node takes the same branch.
mesh::ProcessGroupPtr nccl_world() {
  if (cuda::device_count() < distributed::local_world_size()) {
    WARN("skipped: NCCL needs one GPU per rank; " << cuda::device_count() << " GPU(s) for "
                                                  << distributed::local_world_size() << " ranks on this node");
    return nullptr;
  }
  return distributed::world_group(DeviceType::cuda);
}

// The MPI world group for CUDA tensors, or nullptr (after a warning) without a GPU.
mesh::ProcessGroupPtr mpi_world() {
  if (cuda::device_count() == 0) {
    WARN("skipped: no GPU");
    return nullptr;
  }
  return distributed::world_group(DeviceType::cpu);
}

Tensor gpu_tensor_of(const std::vector<double>& values, DType dtype, Shape shape = {}) {
  return tensor_of(values, dtype, std::move(shape)).to(gpu());
}

std::vector<double> host_values(const Tensor& t) { return values_of(t.to(Device::cpu())); }

// The ops each backend supports on `dtype`: NCCL has no integer avg.
std::vector<ReduceOp> ops_for(DType dtype, bool integer_avg) {
  std::vector<ReduceOp> ops = {ReduceOp::sum(), ReduceOp::max(), ReduceOp::min()};
  if (is_floating(dtype) || integer_avg) ops.push_back(ReduceOp::avg());
  if (is_floating(dtype)) ops.push_back(ReduceOp::premul_sum(0.25));
  return ops;
}

// 16-bit floats round (and NCCL may reduce in a different order): a few ulps.
double tolerance(DType dtype, double value) {
  if (dtype == DType::bf16) return std::abs(value) * 0.02 + 1e-6;
  if (dtype == DType::f16) return std::abs(value) * 2e-3 + 1e-6;
  return 1e-9;
}

// Each check below runs on both backends.

void check_all_gather(const mesh::ProcessGroupPtr& pg) {
  const int64_t n = 5;
  for (DType dtype : kAllDTypes) {
    INFO(pg->backend() << " " << dtype_name(dtype));
    Tensor in = gpu_tensor_of(contributions(pg->rank(), n), dtype);
    Tensor out = empty({pg->size(), n}, {.dtype = dtype, .device = gpu()});
    pg->all_gather_into_tensor(out, in)->wait();
    auto got = host_values(out);
    for (int r = 0; r < pg->size(); ++r) {
      for (int64_t i = 0; i < n; ++i) REQUIRE(got[r * n + i] == contribution(r, i));
    }
  }
}

void check_reduce_scatter(const mesh::ProcessGroupPtr& pg, bool integer_avg) {
  const int64_t chunk = 6;
  const int64_t n = chunk * pg->size();
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : ops_for(dtype, integer_avg)) {
      INFO(pg->backend() << " " << dtype_name(dtype) << " " << mesh::to_string(op));
      Tensor in = gpu_tensor_of(contributions(pg->rank(), n), dtype);
      Tensor out = empty({chunk}, {.dtype = dtype, .device = gpu()});
      pg->reduce_scatter_tensor(out, in, op)->wait();
      auto got = host_values(out);
      for (int64_t i = 0; i < chunk; ++i) {
        double expected = reduce_expected(op, pg->rank() * chunk + i, pg->size(), dtype);
        REQUIRE(got[i] == Approx(expected).margin(tolerance(dtype, expected)));
      }
      REQUIRE(host_values(in) == contributions(pg->rank(), n));  // the input is left alone
    }
  }
}

void check_all_reduce(const mesh::ProcessGroupPtr& pg, bool integer_avg) {
  const int64_t n = 9;
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : ops_for(dtype, integer_avg)) {
      INFO(pg->backend() << " " << dtype_name(dtype) << " " << mesh::to_string(op));
      Tensor t = gpu_tensor_of(contributions(pg->rank(), n), dtype, {3, 3});
      pg->all_reduce(t, op)->wait();
      auto got = host_values(t);
      for (int64_t i = 0; i < n; ++i) {
        double expected = reduce_expected(op, i, pg->size(), dtype);
        REQUIRE(got[i] == Approx(expected).margin(tolerance(dtype, expected)));
      }
    }
  }
}

void check_broadcast(const mesh::ProcessGroupPtr& pg) {
  for (int root = 0; root < pg->size(); ++root) {
    for (DType dtype : {DType::f32, DType::bf16, DType::i64}) {
      Tensor t = gpu_tensor_of(contributions(pg->rank(), 8), dtype);
      pg->broadcast(t, root)->wait();
      REQUIRE(host_values(t) == contributions(root, 8));
    }
  }
}

void check_all_to_all(const mesh::ProcessGroupPtr& pg) {
  const int me = pg->rank();
  {
    // Equal splits: rank s sends rows [r*rows, (r+1)*rows) to rank r; value = 100*s + 10*r + k.
    const int64_t rows = 2, cols = 3;
    std::vector<double> send;
    for (int r = 0; r < pg->size(); ++r) {
      for (int64_t k = 0; k < rows * cols; ++k) send.push_back(100 * me + 10 * r + k);
    }
    Tensor in = gpu_tensor_of(send, DType::f64, {pg->size() * rows, cols});
    Tensor out = empty({pg->size() * rows, cols}, {.dtype = DType::f64, .device = gpu()});
    pg->all_to_all_single(out, in)->wait();
    auto got = host_values(out);
    for (int s = 0; s < pg->size(); ++s) {
      for (int64_t k = 0; k < rows * cols; ++k) REQUIRE(got[s * rows * cols + k] == 100 * s + 10 * me + k);
    }
  }
  {
    // Uneven splits: rank s sends s+r rows to rank r (none from rank 0 to itself).
    std::vector<int64_t> in_splits, out_splits;
    std::vector<double> send;
    for (int r = 0; r < pg->size(); ++r) {
      in_splits.push_back(me + r);
      out_splits.push_back(r + me);
      for (int64_t k = 0; k < me + r; ++k) send.push_back(1000 * me + 10 * r + k);
    }
    int64_t out_rows = 0;
    for (auto s : out_splits) out_rows += s;
    if (send.empty() || out_rows == 0) return;  // one rank alone: nothing to exchange
    Tensor in = gpu_tensor_of(send, DType::i64, {static_cast<int64_t>(send.size()), 1});
    Tensor out = empty({out_rows, 1}, {.dtype = DType::i64, .device = gpu()});
    pg->all_to_all_single(out, in, out_splits, in_splits)->wait();
    auto got = host_values(out);
    size_t at = 0;
    for (int s = 0; s < pg->size(); ++s) {
      for (int64_t k = 0; k < s + me; ++k) REQUIRE(got[at++] == 1000 * s + 10 * me + k);
    }
  }
}

// Pairs (0,1), (2,3), ...: the even rank sends first, the odd one receives first,
// so the exchange completes on a backend that runs point-to-point calls in order.
void check_pairwise_send_recv(const mesh::ProcessGroupPtr& pg) {
  const int me = pg->rank();
  const int peer = me % 2 == 0 ? me + 1 : me - 1;
  if (peer >= pg->size()) return;
  Tensor mine = gpu_tensor_of(contributions(me, 6), DType::bf16);
  Tensor theirs = empty({6}, {.dtype = DType::bf16, .device = gpu()});
  if (me % 2 == 0) {
    auto send = pg->send(mine, peer);
    auto recv = pg->recv(theirs, peer);
    send->wait();
    recv->wait();
  } else {
    auto recv = pg->recv(theirs, peer);
    auto send = pg->send(mine, peer);
    recv->wait();
    send->wait();
  }
  REQUIRE(host_values(theirs) == contributions(peer, 6));
}

}  // namespace

// ---- NCCL backend -------------------------------------------------------------

TEST_CASE("nccl: the world group for cuda is an NCCL group over every rank") {
  auto pg = nccl_world();
  if (!pg) return;
  REQUIRE(pg->backend() == "nccl");
  REQUIRE(pg->size() == distributed::world_size());
  REQUIRE(pg->rank() == distributed::rank());
}

TEST_CASE("nccl: all_gather_into_tensor puts rank r's input at offset r, for every dtype") {
  auto pg = nccl_world();
  if (!pg) return;
  check_all_gather(pg);
}

TEST_CASE("nccl: reduce_scatter_tensor gives each rank its chunk, for sum avg max min premul_sum") {
  auto pg = nccl_world();
  if (!pg) return;
  check_reduce_scatter(pg, /*integer_avg=*/false);
}

TEST_CASE("nccl: all_reduce reduces in place, for every op and dtype") {
  auto pg = nccl_world();
  if (!pg) return;
  check_all_reduce(pg, /*integer_avg=*/false);
}

TEST_CASE("nccl: avg on an integer dtype is an error naming the op and dtype") {
  auto pg = nccl_world();
  if (!pg) return;
  Tensor t = gpu_tensor_of({1, 2, 3}, DType::i64);
  REQUIRE_THROWS_WITH(pg->all_reduce(t, ReduceOp::avg()),
                      Catch::Contains("all_reduce") && Catch::Contains("avg on i64 is not supported"));
  // The group still works afterwards.
  pg->all_reduce(t)->wait();
  REQUIRE(host_values(t) == std::vector<double>{1.0 * pg->size(), 2.0 * pg->size(), 3.0 * pg->size()});
}

TEST_CASE("nccl: broadcast copies the root's tensor to every rank, from every root") {
  auto pg = nccl_world();
  if (!pg) return;
  check_broadcast(pg);
}

TEST_CASE("nccl: all_to_all_single with equal and uneven splits") {
  auto pg = nccl_world();
  if (!pg) return;
  check_all_to_all(pg);
}

TEST_CASE("nccl: send and recv between pairs of ranks") {
  auto pg = nccl_world();
  if (!pg) return;
  check_pairwise_send_recv(pg);
}

TEST_CASE("nccl: a ring of sends and receives completes when coalesced") {
  auto pg = nccl_world();
  if (!pg) return;
  const int next = (pg->rank() + 1) % pg->size();
  const int prev = (pg->rank() + pg->size() - 1) % pg->size();
  Tensor out = gpu_tensor_of(contributions(pg->rank(), 4), DType::f32);
  Tensor in = empty({4}, {.dtype = DType::f32, .device = gpu()});
  pg->start_coalescing();
  pg->recv(in, prev);
  pg->send(out, next);
  pg->end_coalescing()->wait();
  REQUIRE(host_values(in) == contributions(prev, 4));
}

TEST_CASE("nccl: coalesced collectives launch at end_coalescing and complete together") {
  auto pg = nccl_world();
  if (!pg) return;
  Tensor a = gpu_tensor_of(contributions(pg->rank(), 10), DType::f32);
  Tensor b = full({20}, 2.0, {.device = gpu()});
  Tensor gathered = empty({pg->size() * 10}, {.device = gpu()});
  Tensor scattered = empty({3}, {.dtype = DType::bf16, .device = gpu()});
  Tensor to_scatter = gpu_tensor_of(contributions(pg->rank(), 3 * pg->size()), DType::bf16);
  pg->start_coalescing();
  auto reduce = pg->all_reduce(b);
  pg->all_gather_into_tensor(gathered, a);
  pg->reduce_scatter_tensor(scattered, to_scatter, ReduceOp::premul_sum(0.5));
  // Not launched yet: not complete, and waiting on it is an error.
  REQUIRE_FALSE(reduce->is_completed());
  REQUIRE_THROWS_WITH(reduce->wait(), Catch::Contains("end_coalescing"));
  auto work = pg->end_coalescing();
  work->wait();
  for (double v : host_values(b)) REQUIRE(v == 2.0 * pg->size());
  auto got = host_values(gathered);
  for (int r = 0; r < pg->size(); ++r) {
    for (int64_t i = 0; i < 10; ++i) REQUIRE(got[r * 10 + i] == contribution(r, i));
  }
  auto got_scattered = host_values(scattered);
  for (int64_t i = 0; i < 3; ++i) {
    double expected = reduce_expected(ReduceOp::premul_sum(0.5), pg->rank() * 3 + i, pg->size(), DType::bf16);
    REQUIRE(got_scattered[i] == Approx(expected).margin(tolerance(DType::bf16, expected)));
  }
  reduce->wait();  // its part is launched now
  REQUIRE(reduce->is_completed());
  REQUIRE_THROWS_WITH(pg->end_coalescing(), Catch::Contains("start_coalescing was not called"));
}

TEST_CASE("nccl: wait with a timeout blocks the host until the collective completes") {
  auto pg = nccl_world();
  if (!pg) return;
  Tensor t = full({1 << 16}, 1.0, {.device = gpu()});
  auto work = pg->all_reduce(t);
  work->wait(std::chrono::seconds(60));
  REQUIRE(work->is_completed());
  for (double v : host_values(t)) REQUIRE(v == pg->size());
}

TEST_CASE("nccl: the comm stream waits for the caller's current stream, also a side stream") {
  auto pg = nccl_world();
  if (!pg) return;
  const int device = cuda::current_device();
  cudaStream_t side = cuda::create_stream(device);
  Tensor t;
  {
    cuda::StreamGuard guard(device, side);
    t = empty({1 << 18}, {.device = gpu()});
    t.fill_(pg->rank() + 1.0);  // enqueued on the side stream, then the collective
    pg->all_reduce(t)->wait();  // orders the side stream after it
    double expected = pg->size() * (pg->size() + 1) / 2.0;
    for (double v : host_values(t)) REQUIRE(v == expected);
  }
}

TEST_CASE("nccl: async collectives complete when waited on out of order") {
  auto pg = nccl_world();
  if (!pg) return;
  std::vector<Tensor> tensors;
  std::vector<mesh::WorkPtr> works;
  for (int k = 0; k < 4; ++k) {
    tensors.push_back(full({1000}, k + 1, {.device = gpu()}));
    works.push_back(pg->all_reduce(tensors.back()));
  }
  for (int k = 3; k >= 0; --k) works[k]->wait();
  for (int k = 0; k < 4; ++k) {
    for (double v : host_values(tensors[k])) REQUIRE(v == (k + 1) * pg->size());
  }
}

TEST_CASE("nccl: barrier blocks the host until every rank reached it") {
  auto pg = nccl_world();
  if (!pg) return;
  auto work = pg->barrier();
  work->wait();
  REQUIRE(work->is_completed());
}

TEST_CASE("nccl: collectives on empty tensors complete") {
  auto pg = nccl_world();
  if (!pg) return;
  Tensor in = empty({0}, {.device = gpu()});
  Tensor out = empty({0}, {.device = gpu()});
  pg->all_gather_into_tensor(out, in)->wait();
  pg->reduce_scatter_tensor(out, in)->wait();
  pg->all_reduce(in, ReduceOp::avg())->wait();
  pg->broadcast(in, 0)->wait();
  REQUIRE(out.numel() == 0);
}

TEST_CASE("nccl: a tensor off the group's device is an error naming the op, group and device") {
  auto pg = nccl_world();
  if (!pg) return;
  REQUIRE_THROWS_WITH(pg->all_reduce(full({2}, 1.0)), Catch::Contains("all_reduce on group 'world' (nccl") &&
                                                          Catch::Contains("got a tensor on cpu"));
}

TEST_CASE("nccl: sub-groups from new_subgroup and split reduce among their members") {
  auto pg = nccl_world();
  if (!pg) return;
  std::vector<int> evens;
  for (int r = 0; r < pg->size(); r += 2) evens.push_back(r);
  auto even_group = pg->new_subgroup(evens, "evens");
  if (pg->rank() % 2 == 0) {
    REQUIRE(even_group != nullptr);
    REQUIRE(even_group->backend() == "nccl");
    REQUIRE(even_group->size() == static_cast<int>(evens.size()));
    REQUIRE(even_group->rank() == pg->rank() / 2);
    REQUIRE(even_group->global_ranks() == evens);
    Tensor t = full({2}, pg->rank(), {.device = gpu()});
    even_group->all_reduce(t)->wait();
    double expected = 0;
    for (int r : evens) expected += r;
    REQUIRE(host_values(t) == std::vector<double>{expected, expected});
  } else {
    REQUIRE(even_group == nullptr);
  }
  // Reversed order within each parity (key = size - rank).
  auto parity = pg->split(pg->rank() % 2, pg->size() - pg->rank(), "parity");
  REQUIRE(parity != nullptr);
  std::vector<int> members;
  for (int r = pg->size() - 1; r >= 0; --r) {
    if (r % 2 == pg->rank() % 2) members.push_back(r);
  }
  REQUIRE(parity->global_ranks() == members);
  Tensor t = full({1}, pg->rank(), {.device = gpu()});
  parity->all_reduce(t, ReduceOp::max())->wait();
  REQUIRE(host_values(t)[0] == members.front());
  // Rank 0 of the sub-group broadcasts: the highest rank of this parity.
  Tensor b = full({3}, pg->rank(), {.dtype = DType::i32, .device = gpu()});
  parity->broadcast(b, 0)->wait();
  REQUIRE(host_values(b) == std::vector<double>(3, members.front()));
}

TEST_CASE("nccl: DTR_DEBUG_COLLECTIVES finds a desync over the bootstrap group") {
  auto pg = nccl_world();
  if (!pg || pg->size() < 2) return;
  mesh::set_debug_collectives(true);
  Tensor t = full({4}, 1.0, {.device = gpu()});
  auto mismatched = [&] {
    if (pg->rank() == 0) {
      pg->all_reduce(t)->wait();
    } else {
      pg->broadcast(t, 0)->wait();
    }
  };
  REQUIRE_THROWS_WITH(mismatched(), Catch::Contains("desync") && Catch::Contains("rank 0: all_reduce") &&
                                        Catch::Contains("rank 1: broadcast"));
  pg->all_reduce(t)->wait();
  mesh::set_debug_collectives(false);
  REQUIRE(host_values(t)[0] == pg->size());
}

// ---- MPI backend on CUDA tensors (staged through pinned host memory) ----------

TEST_CASE("mpi on cuda tensors: all_gather_into_tensor, for every dtype") {
  auto pg = mpi_world();
  if (!pg) return;
  check_all_gather(pg);
}

TEST_CASE("mpi on cuda tensors: reduce_scatter_tensor, for every op and dtype") {
  auto pg = mpi_world();
  if (!pg) return;
  check_reduce_scatter(pg, /*integer_avg=*/true);
}

TEST_CASE("mpi on cuda tensors: all_reduce, for every op and dtype") {
  auto pg = mpi_world();
  if (!pg) return;
  check_all_reduce(pg, /*integer_avg=*/true);
}

TEST_CASE("mpi on cuda tensors: broadcast from every root") {
  auto pg = mpi_world();
  if (!pg) return;
  check_broadcast(pg);
}

TEST_CASE("mpi on cuda tensors: all_to_all_single with equal and uneven splits") {
  auto pg = mpi_world();
  if (!pg) return;
  check_all_to_all(pg);
}

TEST_CASE("mpi on cuda tensors: send and recv between pairs, and around the ring") {
  auto pg = mpi_world();
  if (!pg) return;
  check_pairwise_send_recv(pg);
  const int next = (pg->rank() + 1) % pg->size();
  const int prev = (pg->rank() + pg->size() - 1) % pg->size();
  Tensor out = gpu_tensor_of(contributions(pg->rank(), 4), DType::f16);
  Tensor in = empty({4}, {.dtype = DType::f16, .device = gpu()});
  auto recv = pg->recv(in, prev, 3);
  auto send = pg->send(out, next, 3);
  send->wait();
  recv->wait();
  REQUIRE(host_values(in) == contributions(prev, 4));
}
