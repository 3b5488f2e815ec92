// ProcessGroup collectives over MPI, at whatever world size mpirun gives (1-4).
// Rank r contributes values computed from r, so every expected result is a closed
// form evaluated here, independently of the code under test.
#include "dtr/mesh/debug_collectives.h"
#include "dtr/mesh/distributed.h"
#include "dtr/mesh/process_group.h"
#include "tests/support/collective_expectations.h"
#include "tests/support/mpi_test_util.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

using namespace dtr;
using dtr::mesh::ReduceOp;
using dtr::testing::tensor_of;
using dtr::testing::contribution;
using dtr::testing::contributions;
using dtr::testing::reduce_expected;
using dtr::testing::values_of;
using dtr::testing::world;

namespace {

const std::vector<DType> kTestDTypes = {DType::f32, DType::f64, DType::bf16, DType::i64};

std::vector<ReduceOp> ops_for(DType dtype) {
  std::vector<ReduceOp> ops = {ReduceOp::sum(), ReduceOp::avg(), ReduceOp::max(), ReduceOp::min()};
  if (is_floating(dtype)) ops.push_back(ReduceOp::premul_sum(0.25));
  return ops;
}

// bf16 rounds each pairwise combination once: allow a few ulps of 2^-8.
double tolerance(DType dtype, double value) { return dtype == DType::bf16 ? std::abs(value) * 0.02 : 1e-9; }

}  // namespace

TEST_CASE("all_gather_into_tensor puts rank r's input at offset r, for f32 f64 bf16 i64") {
  auto pg = world();
  const int64_t n = 5;
  for (DType dtype : kTestDTypes) {
    Tensor in = tensor_of(contributions(pg->rank(), n), dtype);
    Tensor out = empty({pg->size(), n}, {.dtype = dtype});
    pg->all_gather_into_tensor(out, in)->wait();
    auto got = values_of(out);
    for (int r = 0; r < pg->size(); ++r) {
      for (int64_t i = 0; i < n; ++i) REQUIRE(got[r * n + i] == contribution(r, i));
    }
  }
}

TEST_CASE("reduce_scatter_tensor gives each rank its chunk of the reduction, for every op and dtype") {
  auto pg = world();
  const int64_t chunk = 6;
  const int64_t n = chunk * pg->size();
  for (DType dtype : kTestDTypes) {
    for (ReduceOp op : ops_for(dtype)) {
      INFO(dtype_name(dtype) << " " << mesh::to_string(op));
      Tensor in = tensor_of(contributions(pg->rank(), n), dtype);
      Tensor in_copy = in.clone();
      Tensor out = empty({chunk}, {.dtype = dtype});
      pg->reduce_scatter_tensor(out, in, op)->wait();
      auto got = values_of(out);
      for (int64_t i = 0; i < chunk; ++i) {
        double expected = reduce_expected(op, pg->rank() * chunk + i, pg->size(), dtype);
        REQUIRE(got[i] == Approx(expected).margin(tolerance(dtype, expected)));
      }
      REQUIRE(values_of(in) == values_of(in_copy));  // the input is left alone (premul scales a copy)
    }
  }
}

TEST_CASE("all_gather_into_tensor_coalesced gathers every pair, empty ones and views of one buffer included") {
  auto pg = world();
  const int size = pg->size();
  const std::vector<int64_t> lengths = {5, 0, 12, 1};
  for (DType dtype : kTestDTypes) {
    INFO(dtype_name(dtype));
    // Inputs: pair k holds (k + 1) * contribution(rank, i). Outputs: pair 2 a 3-D
    // tensor of its own, the others views of one buffer at odd offsets.
    std::vector<Tensor> ins, outs;
    Tensor shared = empty({1 + size * (5 + 0 + 1) + 2}, {.dtype = dtype});
    int64_t offset = 1;
    for (size_t k = 0; k < lengths.size(); ++k) {
      std::vector<double> v = contributions(pg->rank(), lengths[k]);
      for (double& x : v) x *= static_cast<double>(k + 1);
      ins.push_back(tensor_of(v, dtype));
      if (k == 2) {
        outs.push_back(empty({size, 3, 4}, {.dtype = dtype}));
      } else {
        outs.push_back(shared.narrow(0, offset, size * lengths[k]));
        offset += size * lengths[k] + 1;
      }
    }
    const int64_t before = pg->sequence();
    pg->all_gather_into_tensor_coalesced(outs, ins)->wait();
    REQUIRE(pg->sequence() == before + 1);  // one collective
    for (size_t k = 0; k < lengths.size(); ++k) {
      INFO("pair " << k);
      auto got = values_of(outs[k]);
      REQUIRE(static_cast<int64_t>(got.size()) == size * lengths[k]);
      for (int r = 0; r < size; ++r) {
        for (int64_t i = 0; i < lengths[k]; ++i) {
          REQUIRE(got[r * lengths[k] + i] == static_cast<double>(k + 1) * contribution(r, i));
        }
      }
    }
  }
}

TEST_CASE("reduce_scatter_tensor_coalesced gives each rank its chunk of every pair, for every op and dtype") {
  auto pg = world();
  const int size = pg->size();
  const std::vector<int64_t> chunks = {6, 0, 1, 3};
  for (DType dtype : kTestDTypes) {
    for (ReduceOp op : ops_for(dtype)) {
      INFO(dtype_name(dtype) << " " << mesh::to_string(op));
      std::vector<Tensor> ins, copies, outs;
      Tensor shared = empty({10 + 3}, {.dtype = dtype});  // outputs as views, gaps between them
      int64_t offset = 0;
      for (int64_t chunk : chunks) {
        ins.push_back(tensor_of(contributions(pg->rank(), chunk * size), dtype));
        copies.push_back(ins.back().clone());
        outs.push_back(shared.narrow(0, offset, chunk));
        offset += chunk + 1;
      }
      pg->reduce_scatter_tensor_coalesced(outs, ins, op)->wait();
      for (size_t k = 0; k < chunks.size(); ++k) {
        INFO("pair " << k);
        auto got = values_of(outs[k]);
        for (int64_t i = 0; i < chunks[k]; ++i) {
          const double expected = reduce_expected(op, pg->rank() * chunks[k] + i, size, dtype);
          REQUIRE(got[i] == Approx(expected).margin(tolerance(dtype, expected)));
        }
        REQUIRE(values_of(ins[k]) == values_of(copies[k]));  // inputs are left alone
      }
    }
  }
}

TEST_CASE("coalesced collectives in flight together, and a send at the largest tag, keep their data apart") {
  // Same shapes, different values: messages matched to the wrong collective would
  // swap them. 512 KiB pairs move after the calls return (past MPI's eager size).
  // With DTR_DEBUG_COLLECTIVES, each call's exchange also runs while the ones
  // before it are in flight.
  const bool debug = GENERATE(false, true);
  INFO("DTR_DEBUG_COLLECTIVES " << debug);
  mesh::set_debug_collectives(debug);
  struct Off {
    ~Off() { mesh::set_debug_collectives(false); }
  } off;  // also when a check fails
  auto pg = world();
  const int size = pg->size();
  const int next = (pg->rank() + 1) % size;
  const int prev = (pg->rank() + size - 1) % size;
  const std::vector<int64_t> lengths = {128 * 1024, 3, 64 * 1024};
  auto inputs = [&](double scale, int64_t per_rank) {
    std::vector<Tensor> ins;
    for (int64_t n : lengths) {
      std::vector<double> v = contributions(pg->rank(), n * per_rank);
      for (double& x : v) x *= scale;
      ins.push_back(tensor_of(v, DType::f32));
    }
    return ins;
  };
  auto outputs = [&](int64_t per_rank) {
    std::vector<Tensor> outs;
    for (int64_t n : lengths) outs.push_back(empty({n * per_rank}));
    return outs;
  };
  const std::vector<Tensor> gather_a = inputs(1, 1), gather_b = inputs(-2, 1), scatter = inputs(3, size);
  const std::vector<Tensor> gathered_a = outputs(size), gathered_b = outputs(size), scattered = outputs(1);
  Tensor sent = tensor_of(contributions(pg->rank(), 4), DType::f32);
  Tensor received = empty({4});
  auto recv = pg->recv(received, prev, mesh::ProcessGroup::kMaxTag);
  mesh::WorkPtr works[] = {pg->all_gather_into_tensor_coalesced(gathered_a, gather_a),
                           pg->reduce_scatter_tensor_coalesced(scattered, scatter, ReduceOp::sum()),
                           pg->all_gather_into_tensor_coalesced(gathered_b, gather_b),
                           pg->send(sent, next, mesh::ProcessGroup::kMaxTag)};
  for (int k = 3; k >= 0; --k) works[k]->wait();
  recv->wait();
  REQUIRE(values_of(received) == contributions(prev, 4));
  for (size_t k = 0; k < lengths.size(); ++k) {
    INFO("pair " << k);
    const int64_t n = lengths[k];
    const auto a = values_of(gathered_a[k]), b = values_of(gathered_b[k]), s = values_of(scattered[k]);
    for (int r = 0; r < size; ++r) {
      for (int64_t i = 0; i < n; i += 97) {
        REQUIRE(a[r * n + i] == contribution(r, i));
        REQUIRE(b[r * n + i] == -2 * contribution(r, i));
      }
    }
    for (int64_t i = 0; i < n; i += 97) {
      REQUIRE(s[i] == 3 * reduce_expected(ReduceOp::sum(), pg->rank() * n + i, size, DType::f32));
    }
  }
}

TEST_CASE("coalesced collectives reject mismatched pairs, naming the pair") {
  auto pg = world();
  const int size = pg->size();
  Tensor in = empty({4}, {.dtype = DType::f32});
  REQUIRE_THROWS_WITH(pg->all_gather_into_tensor_coalesced({}, {}), Catch::Contains("at least one"));
  REQUIRE_THROWS_WITH(pg->all_gather_into_tensor_coalesced({empty({4 * size})}, {in, in}),
                      Catch::Contains("as many outputs as inputs"));
  REQUIRE_THROWS_WITH(pg->all_gather_into_tensor_coalesced({empty({4 * size}), empty({4 * size + 1})}, {in, in}),
                      Catch::Contains("pair 1 of 2") && Catch::Contains("expected an output of"));
  const Tensor in_f64 = empty({4}, {.dtype = DType::f64});
  const Tensor out_f64 = empty({4 * size}, {.dtype = DType::f64});
  REQUIRE_THROWS_WITH(pg->all_gather_into_tensor_coalesced({empty({4 * size}), out_f64}, {in, in_f64}),
                      Catch::Contains("dtypes differ"));
  REQUIRE_THROWS_WITH(pg->reduce_scatter_tensor_coalesced({empty({5})}, {empty({4 * size})}),
                      Catch::Contains("pair 0 of 1") && Catch::Contains("expected an input of"));
  REQUIRE_THROWS_WITH(pg->reduce_scatter_tensor_coalesced({empty({4}, {.dtype = DType::i64})},
                                                          {empty({4 * size}, {.dtype = DType::i64})},
                                                          ReduceOp::premul_sum(2)),
                      Catch::Contains("premul_sum needs a floating dtype"));
}

TEST_CASE("reduce_scatter_tensor max and min: a NaN from any rank wins, as in dtr's kernels") {
  auto pg = world();
  const int last = pg->size() - 1;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (ReduceOp op : {ReduceOp::max(), ReduceOp::min()}) {
      INFO(dtype_name(dtype) << " " << mesh::to_string(op));
      // Every rank's chunk: element 0 is NaN on the last rank only, element 1 nowhere.
      std::vector<double> values;
      for (int r = 0; r < pg->size(); ++r) {
        values.push_back(pg->rank() == last ? std::nan("") : 1.0 + pg->rank());
        values.push_back(1.0 + pg->rank());
      }
      Tensor out = empty({2}, {.dtype = dtype});
      pg->reduce_scatter_tensor(out, tensor_of(values, dtype), op)->wait();
      auto got = values_of(out);
      REQUIRE(std::isnan(got[0]));
      REQUIRE(got[1] == (op == ReduceOp::max() ? static_cast<double>(pg->size()) : 1.0));
    }
  }
}

TEST_CASE("all_reduce reduces in place, for every op and dtype") {
  auto pg = world();
  const int64_t n = 9;
  for (DType dtype : kTestDTypes) {
    for (ReduceOp op : ops_for(dtype)) {
      INFO(dtype_name(dtype) << " " << mesh::to_string(op));
      Tensor t = tensor_of(contributions(pg->rank(), n), dtype, {3, 3});
      pg->all_reduce(t, op)->wait();
      auto got = values_of(t);
      for (int64_t i = 0; i < n; ++i) {
        double expected = reduce_expected(op, i, pg->size(), dtype);
        REQUIRE(got[i] == Approx(expected).margin(tolerance(dtype, expected)));
      }
    }
  }
}

TEST_CASE("all_reduce of f16 sums in f32 per combination") {
  auto pg = world();
  // 1000.5 is an f16 (spacing 0.5 there); N * 1000.5 is exact in f32 and within
  // one f16 rounding of the true sum.
  Tensor t = full({4}, 1000.5, {.dtype = DType::f16});
  pg->all_reduce(t, ReduceOp::sum())->wait();
  double expected = 1000.5 * pg->size();
  for (double v : values_of(t)) REQUIRE(v == Approx(expected).margin(expected * 1e-3));
}

TEST_CASE("broadcast copies the root's tensor to every rank, from every root") {
  auto pg = world();
  for (int root = 0; root < pg->size(); ++root) {
    Tensor t = tensor_of(contributions(pg->rank(), 8), DType::f32);
    pg->broadcast(t, root)->wait();
    REQUIRE(values_of(t) == contributions(root, 8));
  }
}

TEST_CASE("all_to_all_single with equal splits sends block r to rank r") {
  auto pg = world();
  const int64_t rows = 2, cols = 3;
  // Rank s sends rows [r*rows, (r+1)*rows) to rank r; value = 100*s + 10*r + k.
  std::vector<double> send;
  for (int r = 0; r < pg->size(); ++r) {
    for (int64_t k = 0; k < rows * cols; ++k) send.push_back(100 * pg->rank() + 10 * r + k);
  }
  Tensor in = tensor_of(send, DType::f64, {pg->size() * rows, cols});
  Tensor out = empty({pg->size() * rows, cols}, {.dtype = DType::f64});
  pg->all_to_all_single(out, in)->wait();
  auto got = values_of(out);
  for (int s = 0; s < pg->size(); ++s) {
    for (int64_t k = 0; k < rows * cols; ++k) REQUIRE(got[s * rows * cols + k] == 100 * s + 10 * pg->rank() + k);
  }
}

TEST_CASE("all_to_all_single with uneven splits: rank s sends s+r+1 rows to rank r") {
  auto pg = world();
  const int me = pg->rank();
  std::vector<int64_t> in_splits, out_splits;
  std::vector<double> send;
  for (int r = 0; r < pg->size(); ++r) {
    in_splits.push_back(me + r + 1);
    out_splits.push_back(r + me + 1);
    for (int64_t k = 0; k < me + r + 1; ++k) send.push_back(1000 * me + 10 * r + k);
  }
  int64_t in_rows = static_cast<int64_t>(send.size());
  int64_t out_rows = 0;
  for (auto s : out_splits) out_rows += s;
  Tensor in = tensor_of(send, DType::i64, {in_rows, 1});
  Tensor out = empty({out_rows, 1}, {.dtype = DType::i64});
  pg->all_to_all_single(out, in, out_splits, in_splits)->wait();
  auto got = values_of(out);
  size_t at = 0;
  for (int s = 0; s < pg->size(); ++s) {
    for (int64_t k = 0; k < s + me + 1; ++k) REQUIRE(got[at++] == 1000 * s + 10 * me + k);
  }
}

TEST_CASE("send and recv pass a tensor around the ring") {
  auto pg = world();
  const int next = (pg->rank() + 1) % pg->size();
  const int prev = (pg->rank() + pg->size() - 1) % pg->size();
  Tensor out = tensor_of(contributions(pg->rank(), 4), DType::bf16);
  Tensor in = empty({4}, {.dtype = DType::bf16});
  auto recv = pg->recv(in, prev, 3);
  auto send = pg->send(out, next, 3);
  send->wait();
  recv->wait();
  REQUIRE(values_of(in) == contributions(prev, 4));
}

TEST_CASE("collectives on empty tensors complete and leave empty results") {
  auto pg = world();
  Tensor in = empty({0}, {.dtype = DType::f32});
  Tensor out = empty({0}, {.dtype = DType::f32});
  pg->all_gather_into_tensor(out, in)->wait();
  pg->reduce_scatter_tensor(out, in)->wait();
  pg->all_reduce(in, ReduceOp::avg())->wait();
  pg->broadcast(in, 0)->wait();
  REQUIRE(out.numel() == 0);
}

TEST_CASE("a non-contiguous input is copied, a non-contiguous output is rejected") {
  auto pg = world();
  // A transposed 3x2 input: logical values 10*r + (row, col).
  std::vector<double> v = {0, 1, 2, 3, 4, 5};
  for (auto& x : v) x += 10 * pg->rank();
  Tensor in = tensor_of(v, DType::f32, {2, 3}).t();  // [3, 2], not contiguous
  REQUIRE_FALSE(in.is_contiguous());
  Tensor out = empty({pg->size() * 3, 2}, {.dtype = DType::f32});
  pg->all_gather_into_tensor(out, in)->wait();
  auto got = values_of(out);
  for (int r = 0; r < pg->size(); ++r) {
    auto expected = values_of(in);  // this rank's logical order
    for (size_t k = 0; k < expected.size(); ++k) {
      REQUIRE(got[r * 6 + k] == expected[k] - 10 * pg->rank() + 10 * r);
    }
  }
  Tensor strided = empty({2, 3}, {.dtype = DType::f32}).t();
  REQUIRE_THROWS_WITH(pg->all_reduce(strided), Catch::Contains("must be contiguous"));
}

TEST_CASE("the contiguous copy of a non-contiguous input lives until the collective completes") {
  // 1 MiB per input: past MPI's eager size, so it moves after the call returns, while
  // the memory of a copy nobody kept goes to the next allocations (filled here).
  auto pg = world();
  const int64_t n = 512;
  auto input_of = [&](int r) {
    std::vector<double> v(n * n);
    for (int64_t i = 0; i < n * n; ++i) v[i] = r * 1e6 + static_cast<double>(i);
    return tensor_of(v, DType::f32, {n, n}).t();  // not contiguous
  };
  Tensor mine = input_of(pg->rank());
  REQUIRE_FALSE(mine.is_contiguous());
  Tensor single = empty({pg->size() * n, n});
  std::vector<Tensor> pair = {empty({pg->size() * n, n})};
  mesh::WorkPtr gathers[] = {pg->all_gather_into_tensor(single, mine),
                             pg->all_gather_into_tensor_coalesced(pair, {mine})};
  std::vector<Tensor> reused;
  for (int k = 0; k < 4; ++k) reused.push_back(full({n, n}, -1.0));
  for (auto& work : gathers) work->wait();
  for (const Tensor& out : {single, pair.front()}) {
    const auto got = values_of(out);
    for (int r = 0; r < pg->size(); ++r) {
      INFO("rank " << r << "'s block");
      REQUIRE(std::vector<double>(got.begin() + r * n * n, got.begin() + (r + 1) * n * n) ==
              values_of(input_of(r)));
    }
  }
}

TEST_CASE("wrong sizes, dtypes and roots are errors that name what was expected") {
  auto pg = world();
  Tensor in = empty({4}, {.dtype = DType::f32});
  REQUIRE_THROWS_WITH(pg->all_gather_into_tensor(empty({4 * pg->size() + 1}), in),
                      Catch::Contains("expected an output of"));
  REQUIRE_THROWS_WITH(pg->all_gather_into_tensor(empty({4 * pg->size()}, {.dtype = DType::f64}), in),
                      Catch::Contains("dtypes differ"));
  REQUIRE_THROWS_WITH(pg->reduce_scatter_tensor(empty({5}), empty({4 * pg->size()})),
                      Catch::Contains("expected an input of"));
  REQUIRE_THROWS_WITH(pg->broadcast(in, pg->size()), Catch::Contains("is not a rank of group"));
  REQUIRE_THROWS_WITH(pg->all_reduce(empty({2}, {.dtype = DType::i64}), ReduceOp::premul_sum(2)),
                      Catch::Contains("premul_sum needs a floating dtype"));
  REQUIRE_THROWS_WITH(pg->all_reduce(empty({2}, {.device = Device::meta()})), Catch::Contains("meta"));
}

TEST_CASE("async collectives complete when waited on out of order") {
  auto pg = world();
  std::vector<Tensor> tensors;
  std::vector<mesh::WorkPtr> works;
  for (int k = 0; k < 4; ++k) {
    tensors.push_back(full({1000}, k + 1, {.dtype = DType::f32}));
    works.push_back(pg->all_reduce(tensors.back()));
  }
  for (int k = 3; k >= 0; --k) {
    works[k]->wait();
    REQUIRE(works[k]->is_completed());
  }
  for (int k = 0; k < 4; ++k) {
    for (double v : values_of(tensors[k])) REQUIRE(v == (k + 1) * pg->size());
  }
}

TEST_CASE("wait with a timeout throws while the peer has not sent, then succeeds") {
  auto pg = world();
  if (pg->size() < 2) return;
  Tensor buffer = zeros({3});
  if (pg->rank() == 0) {
    auto recv = pg->recv(buffer, 1, 7);
    REQUIRE_THROWS_WITH(recv->wait(std::chrono::milliseconds(50)), Catch::Contains("did not complete within 50 ms"));
    pg->barrier()->wait();  // now rank 1 sends
    recv->wait();
    REQUIRE(values_of(buffer) == std::vector<double>{7, 7, 7});
  } else {
    pg->barrier()->wait();
    if (pg->rank() == 1) pg->send(full({3}, 7), 0, 7)->wait();
  }
}

TEST_CASE("coalesced collectives return one Work covering all of them") {
  auto pg = world();
  Tensor a = full({10}, 1.0), b = full({20}, 2.0);
  Tensor gathered = empty({pg->size() * 10});
  pg->start_coalescing();
  pg->all_reduce(b);
  pg->all_gather_into_tensor(gathered, a);
  auto work = pg->end_coalescing();
  work->wait();
  for (double v : values_of(b)) REQUIRE(v == 2.0 * pg->size());
  for (double v : values_of(gathered)) REQUIRE(v == 1.0);
  REQUIRE_THROWS_WITH(pg->end_coalescing(), Catch::Contains("start_coalescing was not called"));
}

TEST_CASE("sequence numbers and byte counters count every collective") {
  auto pg = world();
  pg->barrier()->wait();
  int64_t before = pg->sequence();
  pg->reset_stats();
  Tensor shard = empty({16}, {.dtype = DType::bf16});
  Tensor full_buffer = empty({16 * pg->size()}, {.dtype = DType::bf16});
  pg->all_gather_into_tensor(full_buffer, shard)->wait();
  pg->all_gather_into_tensor(full_buffer, shard)->wait();
  pg->reduce_scatter_tensor(shard, full_buffer)->wait();
  REQUIRE(pg->sequence() == before + 3);
  auto stats = pg->stats();
  REQUIRE(stats.calls_of(mesh::CollectiveKind::all_gather) == 2);
  REQUIRE(stats.bytes_of(mesh::CollectiveKind::all_gather) == 2 * 16 * 2);
  REQUIRE(stats.bytes_of(mesh::CollectiveKind::reduce_scatter) == 16 * 2 * pg->size());
}

TEST_CASE("bytes sent are counted by the link they cross, as a ring in rank order would send them") {
  auto pg = world();
  const int k = pg->size(), r = pg->rank();
  pg->barrier()->wait();
  pg->reset_stats();
  Tensor shard = empty({16}, {.dtype = DType::bf16});                 // 32 B
  Tensor gathered = empty({16 * k}, {.dtype = DType::bf16});          // 32 k B
  pg->all_gather_into_tensor(gathered, shard)->wait();                // (k - 1) x 32 to the next rank
  pg->reduce_scatter_tensor(shard, gathered)->wait();                 // (k - 1) / k x 32 k
  Tensor summed = full({8 * k}, 1.0, {.dtype = DType::f64});          // 64 k B
  pg->all_reduce(summed)->wait();                                     // 2 (k - 1) / k x 64 k
  Tensor broadcast = full({4}, 2.0f);                                 // 16 B, all but the ring's last rank
  pg->broadcast(broadcast, 0)->wait();
  Tensor to_all = full({4 * k}, 3.0f), from_all = empty({4 * k});     // 16 B to each other rank
  pg->all_to_all_single(from_all, to_all)->wait();
  Tensor message = full({6}, 4.0f);                                   // 24 B, rank 0 to the last
  if (k > 1 && r == 0) pg->send(message, k - 1)->wait();
  if (k > 1 && r == k - 1) pg->recv(message, 0)->wait();
  // The same sums, by hand, from the hosts of this rank and its peers.
  const auto host = [&](int rank) { return distributed::host_of(pg->global_ranks()[static_cast<size_t>(rank)]); };
  int64_t want_within = 0, want_across = 0;
  auto add = [&](int peer, int64_t bytes) { (host(peer) == host(r) ? want_within : want_across) += bytes; };
  if (k > 1) {
    const int next = (r + 1) % k;
    add(next, (k - 1) * 32 + (k - 1) * 32 + 2 * (k - 1) * 64);
    if (r != k - 1) add(next, 16);
    for (int peer = 0; peer < k; ++peer) {
      if (peer != r) add(peer, 16);
    }
    if (r == 0) add(k - 1, 24);
  }
  const mesh::CommStats stats = pg->stats();
  CHECK(stats.sent_within_host == want_within);
  CHECK(stats.sent_across_hosts == want_across);
  if (distributed::num_hosts() == 1) CHECK(stats.sent_across_hosts == 0);
  pg->reset_stats();
  CHECK(pg->stats().sent_within_host == 0);
}

TEST_CASE("sub-groups: a group of the even ranks and a split by parity reduce among their members") {
  auto pg = world();
  std::vector<int> evens;
  for (int r = 0; r < pg->size(); r += 2) evens.push_back(r);
  auto even_group = pg->new_subgroup(evens, "evens");
  if (pg->rank() % 2 == 0) {
    REQUIRE(even_group != nullptr);
    REQUIRE(even_group->size() == static_cast<int>(evens.size()));
    REQUIRE(even_group->rank() == pg->rank() / 2);
    REQUIRE(even_group->global_ranks() == evens);
    Tensor t = full({2}, pg->rank());
    even_group->all_reduce(t)->wait();
    double expected = 0;
    for (int r : evens) expected += r;
    REQUIRE(values_of(t) == std::vector<double>{expected, expected});
  } else {
    REQUIRE(even_group == nullptr);
  }
  auto parity = pg->split(pg->rank() % 2, pg->rank(), "parity");
  REQUIRE(parity != nullptr);
  Tensor t = full({1}, pg->rank());
  parity->all_reduce(t, ReduceOp::max())->wait();
  int last_same_parity = pg->size() - 1 - ((pg->size() - 1 - pg->rank()) % 2);
  REQUIRE(values_of(t)[0] == last_same_parity);
}

TEST_CASE("DTR_DEBUG_COLLECTIVES: ranks calling different collectives all get an error naming each call") {
  auto pg = world();
  if (pg->size() < 2) return;
  mesh::set_debug_collectives(true);
  Tensor t = full({4}, 1.0);
  auto mismatched = [&] {
    if (pg->rank() == 0) {
      pg->all_reduce(t)->wait();
    } else {
      pg->broadcast(t, 0)->wait();
    }
  };
  REQUIRE_THROWS_WITH(mismatched(), Catch::Contains("desync") && Catch::Contains("rank 0: all_reduce") &&
                                        Catch::Contains("rank 1: broadcast"));
  // Same op, different shapes.
  auto shapes = [&] {
    Tensor mine = full({pg->rank() == 0 ? 4 : 5}, 1.0);
    pg->all_reduce(mine)->wait();
  };
  REQUIRE_THROWS_WITH(shapes(), Catch::Contains("[4]") && Catch::Contains("[5]"));
  // Coalesced all-gathers of the same total over different pairs.
  auto pairs = [&] {
    const int n = pg->size();
    if (pg->rank() == 0) {
      pg->all_gather_into_tensor_coalesced({empty({2 * n}), empty({2 * n})}, {full({2}, 1.0), full({2}, 1.0)})->wait();
    } else {
      pg->all_gather_into_tensor_coalesced({empty({4 * n})}, {full({4}, 1.0)})->wait();
    }
  };
  REQUIRE_THROWS_WITH(pairs(), Catch::Contains("desync") && Catch::Contains("(2 tensors coalesced") &&
                                   Catch::Contains("(1 tensor coalesced"));
  // The same number of pairs and the same total, split differently.
  auto splits = [&] {
    const int n = pg->size();
    const int64_t first = pg->rank() == 0 ? 1 : 2;
    pg->all_gather_into_tensor_coalesced({empty({first * n}), empty({(4 - first) * n})},
                                         {full({first}, 1.0), full({4 - first}, 1.0)})
        ->wait();
  };
  REQUIRE_THROWS_WITH(splits(), Catch::Contains("desync") && Catch::Contains("(2 tensors coalesced, sizes #"));
  // Matching calls still go through, with the check on.
  pg->all_reduce(t)->wait();
  mesh::set_debug_collectives(false);
  REQUIRE(values_of(t)[0] == pg->size());
}
