// Agreement among the ranks of a dtr-train job. Each function is a collective over
// `group`: every rank calls it at the same point, so a branch taken on its result
// is taken by every rank alike.
#pragma once

#include "metrics.h"

#include "dtr/mesh/process_group.h"
#include "dtr/tensor/device.h"

#include <functional>

namespace dtr::train {

// Runs `check` on every rank and agrees on it: true on every rank when it threw on
// any, and then rank 0 prints the error (its own, else that of `what` elsewhere).
bool failed_on_any_rank(const mesh::ProcessGroupPtr& group, const char* what, const std::function<void()>& check);

// The mean of `value` over the ranks.
double all_reduce_avg(const mesh::ProcessGroupPtr& group, double value);

// The step's loss averaged over the ranks, whether any rank has a stop signal
// pending, and the bytes all ranks sent within their hosts and across hosts
// since their previous counts: one all-reduce (sum) of {loss, signal number,
// bytes within, bytes across}.
struct StepConsensus {
  double loss = 0;
  bool stop = false;
  int64_t sent_within_host = 0, sent_across_hosts = 0;
};
StepConsensus step_consensus(const mesh::ProcessGroupPtr& group, double local_loss, int signal,
                             int64_t sent_within_host = 0, int64_t sent_across_hosts = 0);

// Every rank's peak bytes by memory tag on `device`.
RankPeaks gather_peaks(const mesh::ProcessGroupPtr& group, Device device);

}  // namespace dtr::train
