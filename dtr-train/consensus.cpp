#include "consensus.h"

#include "dtr/tensor/allocator.h"
#include "dtr/tensor/factory.h"

#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace dtr::train {

namespace {

// True on every rank when `failed` is true on any rank.
bool any_rank(const mesh::ProcessGroupPtr& group, bool failed) {
  Tensor t = full({1}, failed ? 1.0 : 0.0, {.dtype = DType::f64});
  group->all_reduce(t, mesh::ReduceOp::max())->wait();
  return t.item() > 0;
}

}  // namespace

bool failed_on_any_rank(const mesh::ProcessGroupPtr& group, const char* what, const std::function<void()>& check) {
  std::string error;
  try {
    check();
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!any_rank(group, !error.empty())) return false;
  if (group->rank() == 0) {
    const std::string message = error.empty() ? fmt::format("{} failed on another rank", what) : error;
    std::fprintf(stderr, "dtr-train: %s\n", message.c_str());
  }
  return true;
}

double all_reduce_avg(const mesh::ProcessGroupPtr& group, double value) {
  Tensor t = full({1}, value, {.dtype = DType::f64});
  group->all_reduce(t, mesh::ReduceOp::avg())->wait();
  return t.item();
}

StepConsensus step_consensus(const mesh::ProcessGroupPtr& group, double local_loss, int signal,
                             int64_t sent_within_host, int64_t sent_across_hosts) {
  // Byte counts as doubles: exact below 2^53.
  Tensor t = from_vector(std::vector<double>{local_loss, static_cast<double>(signal),
                                             static_cast<double>(sent_within_host),
                                             static_cast<double>(sent_across_hosts)},
                         {4});
  group->all_reduce(t, mesh::ReduceOp::sum())->wait();
  const std::vector<double> v = t.to_vector<double>();
  return {.loss = v[0] / static_cast<double>(group->size()),
          .stop = v[1] > 0,
          .sent_within_host = static_cast<int64_t>(v[2]),
          .sent_across_hosts = static_cast<int64_t>(v[3])};
}

RankPeaks gather_peaks(const mesh::ProcessGroupPtr& group, Device device) {
  const MemoryStats stats = memory_stats(device);
  constexpr size_t kTags = kNumMemoryTags;
  std::vector<double> mine(kTags);
  for (size_t t = 0; t < kTags; ++t) mine[t] = static_cast<double>(stats.by_tag[t].peak_bytes);
  Tensor in = from_vector(mine, {static_cast<int64_t>(kTags)});
  Tensor out = empty({group->size() * static_cast<int64_t>(kTags)}, {.dtype = DType::f64});
  group->all_gather_into_tensor(out, in)->wait();
  const std::vector<double> all = out.to_vector<double>();
  RankPeaks peaks(static_cast<size_t>(group->size()));
  for (size_t r = 0; r < peaks.size(); ++r) {
    for (size_t t = 0; t < kTags; ++t) peaks[r][t] = static_cast<int64_t>(all[r * kTags + t]);
  }
  return peaks;
}

}  // namespace dtr::train
