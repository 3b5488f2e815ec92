#include "dtr/mesh/process_group.h"

#include "dtr/base/error.h"
#include "dtr/mesh/debug_collectives.h"
#include "dtr/mesh/distributed.h"
#include "dtr/mesh/watchdog.h"

#include <algorithm>
#include <numeric>
#include <set>

namespace dtr::mesh {

ProcessGroup::ProcessGroup(int rank, std::vector<int> global_ranks, std::string name)
    : rank_(rank),
      global_ranks_(std::move(global_ranks)),
      name_(std::move(name)),
      profile_name_(profiler::intern(name_)) {
  DTR_INTERNAL_ASSERT(rank_ >= 0 && rank_ < size(), "rank {} outside a group of {}", rank_, size());
}

ProcessGroup::~ProcessGroup() = default;

std::string ProcessGroup::describe() const {
  return fmt::format("'{}' ({}, rank {} of {})", name_, backend(), rank_, size());
}

std::string ProcessGroup::describe(const CollectiveCall& call) const {
  return fmt::format("{} on {}", to_string(call), describe());
}

int64_t ProcessGroup::sequence() const {
  std::lock_guard lock(mutex_);
  return sequence_;
}

CommStats ProcessGroup::stats() const {
  // The members' hosts, read before taking the lock (host_of takes its own).
  std::vector<int> hosts(global_ranks_.size(), 0);
  if (distributed::is_initialized()) {
    for (size_t i = 0; i < hosts.size(); ++i) hosts[i] = distributed::host_of(global_ranks_[i]);
  }
  const int k = size();
  auto remote = [&](int peer) { return hosts[static_cast<size_t>(peer)] != hosts[static_cast<size_t>(rank_)]; };
  int others_remote = 0;
  for (int r = 0; r < k; ++r) others_remote += remote(r) ? 1 : 0;
  std::lock_guard lock(mutex_);
  CommStats s = stats_;
  if (k == 1) return s;  // nothing is sent
  auto add = [&s](int64_t bytes, bool across) { (across ? s.sent_across_hosts : s.sent_within_host) += bytes; };
  add(sent_to_next_, remote((rank_ + 1) % k));
  const int64_t to_all_across = sent_to_all_others_ * others_remote / (k - 1);
  add(to_all_across, true);
  add(sent_to_all_others_ - to_all_across, false);
  for (const auto& [peer, bytes] : sent_to_peer_) add(bytes, remote(peer));
  return s;
}

LinkBytes sent_by_link(const std::vector<ProcessGroupPtr>& groups) {
  LinkBytes sent;
  std::vector<const ProcessGroup*> counted;
  for (const ProcessGroupPtr& group : groups) {
    if (std::find(counted.begin(), counted.end(), group.get()) != counted.end()) continue;
    counted.push_back(group.get());
    const CommStats stats = group->stats();
    sent.within_host += stats.sent_within_host;
    sent.across_hosts += stats.sent_across_hosts;
  }
  return sent;
}

void ProcessGroup::reset_stats() {
  std::lock_guard lock(mutex_);
  stats_ = {};
  sent_to_next_ = 0;
  sent_to_all_others_ = 0;
  sent_to_peer_.clear();
}

void ProcessGroup::count_sent(const CollectiveCall& call, int64_t payload_bytes) {
  const int64_t k = size();
  switch (call.kind) {
    case CollectiveKind::all_gather: sent_to_next_ += (k - 1) * payload_bytes; break;
    case CollectiveKind::reduce_scatter: sent_to_next_ += (k - 1) * payload_bytes / k; break;
    case CollectiveKind::all_reduce: sent_to_next_ += 2 * (k - 1) * payload_bytes / k; break;
    case CollectiveKind::broadcast:
      if ((rank_ - call.root + k) % k != k - 1) sent_to_next_ += payload_bytes;
      break;
    case CollectiveKind::all_to_all: sent_to_all_others_ += (k - 1) * payload_bytes / k; break;
    case CollectiveKind::send: sent_to_peer_[call.root] += payload_bytes; break;
    default: break;  // recv and barrier send no payload
  }
}

namespace {

void check_defined(const Tensor& t, std::string_view what, std::string_view op) {
  DTR_CHECK(t.defined(), "{}: the {} tensor is undefined", op, what);
}

void check_same(const Tensor& a, const Tensor& b, std::string_view op) {
  DTR_CHECK(a.dtype() == b.dtype(), "{}: input and output dtypes differ: input {}, output {}", op, a.dtype(),
            b.dtype());
  DTR_CHECK(a.device() == b.device(), "{}: input and output devices differ: input {}, output {}", op,
            a.device(), b.device());
}

void check_contiguous(const Tensor& t, std::string_view what, std::string_view op) {
  DTR_CHECK(t.is_contiguous(), "{}: the {} tensor must be contiguous (sizes {}, strides {})", op, what,
            shape_str(t.sizes()), shape_str(t.strides()));
}

}  // namespace

CollectiveCall ProcessGroup::begin_collective(profiler::Span& span, CollectiveKind kind, const Tensor& input,
                                              const Tensor& output, std::optional<ReduceOp> op, int root) {
  const Tensor& payload = input.defined() ? input : output;
  return begin_collective(span, describe_call(kind, 0, input, output, op, root),
                          payload.defined() ? static_cast<int64_t>(payload.nbytes()) : 0);
}

CollectiveCall ProcessGroup::begin_collective(profiler::Span& span, CollectiveCall call, int64_t payload_bytes) {
  if (span.active()) span.arg("bytes", payload_bytes).str_arg("group", profile_name_);
  const CollectiveKind kind = call.kind;
  {
    std::lock_guard lock(mutex_);
    const bool p2p = kind == CollectiveKind::send || kind == CollectiveKind::recv;
    call.sequence = p2p ? ++p2p_sequence_ : ++sequence_;
    span.arg("seq", call.sequence);
    stats_.calls[static_cast<int>(kind)] += 1;
    stats_.bytes[static_cast<int>(kind)] += payload_bytes;
    count_sent(call, payload_bytes);
  }
  if (debug_collectives() && kind != CollectiveKind::send && kind != CollectiveKind::recv) {
    std::vector<CollectiveCall> calls = exchange_calls(call);
    std::string desync = find_desync(calls);
    DTR_CHECK(desync.empty(), "collective desync on group {} (detected by DTR_DEBUG_COLLECTIVES): {}",
              describe(), desync);
  }
  return call;
}

WorkPtr ProcessGroup::finish_issue(WorkPtr work, const CollectiveCall& call, const profiler::Span& span) {
  DTR_INTERNAL_ASSERT(work != nullptr, "backend {} returned no Work for {}", backend(), describe(call));
  if (span.active()) {
    work->profile_name_ = span.name();
    work->profile_group_ = profile_name_;
    work->profile_seq_ = call.sequence;
    const int64_t numel = call.input_numel > 0 ? call.input_numel : call.output_numel;
    work->profile_bytes_ = call.dtype >= 0 ? numel * static_cast<int64_t>(element_size(static_cast<DType>(call.dtype))) : 0;
  }
  watch(work);
  std::lock_guard lock(mutex_);
  if (coalescing_) coalesced_.push_back(work);
  return work;
}

WorkPtr ProcessGroup::all_gather_into_tensor(const Tensor& out, const Tensor& in) {
  profiler::Span span("comm", "all_gather");
  constexpr std::string_view op = "all_gather_into_tensor";
  check_defined(out, "output", op);
  check_defined(in, "input", op);
  check_same(in, out, op);
  check_device(in, op);
  check_contiguous(out, "output", op);
  DTR_CHECK(out.numel() == in.numel() * size(),
            "{}: expected an output of {} elements (input {} x {} ranks), got {} elements (shape {}) on rank {}",
            op, in.numel() * size(), in.numel(), size(), out.numel(), shape_str(out.sizes()), rank_);
  Tensor input = in.contiguous();
  auto call = begin_collective(span, CollectiveKind::all_gather, input, out);
  return finish_issue(do_all_gather(out, input, call), call, span);
}

namespace {

void check_reduce_op(ReduceOp op, DType dtype, std::string_view name) {
  if (op.kind == ReduceOp::Kind::premul_sum) {
    DTR_CHECK(is_floating(dtype), "{}: premul_sum needs a floating dtype, got {}", name, dtype);
  }
}

}  // namespace

WorkPtr ProcessGroup::reduce_scatter_tensor(const Tensor& out, const Tensor& in, ReduceOp op) {
  profiler::Span span("comm", "reduce_scatter");
  constexpr std::string_view name = "reduce_scatter_tensor";
  check_defined(out, "output", name);
  check_defined(in, "input", name);
  check_same(in, out, name);
  check_device(in, name);
  check_contiguous(out, "output", name);
  check_reduce_op(op, in.dtype(), name);
  DTR_CHECK(in.numel() == out.numel() * size(),
            "{}: expected an input of {} elements (output {} x {} ranks), got {} elements (shape {}) on rank {}",
            name, out.numel() * size(), out.numel(), size(), in.numel(), shape_str(in.sizes()), rank_);
  Tensor input = in.contiguous();
  auto call = begin_collective(span, CollectiveKind::reduce_scatter, input, out, op);
  return finish_issue(do_reduce_scatter(out, input, op, call), call, span);
}

std::vector<Tensor> ProcessGroup::check_coalesced(const std::vector<Tensor>& outs, const std::vector<Tensor>& ins,
                                                  bool gather, std::string_view op) const {
  DTR_CHECK(!ins.empty() && outs.size() == ins.size(),
            "{}: expected as many outputs as inputs, and at least one, got {} inputs and {} outputs on rank {}", op,
            ins.size(), outs.size(), rank_);
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < ins.size(); ++i) {
    check_defined(outs[i], "output", op);
    check_defined(ins[i], "input", op);
    check_same(ins[i], outs[i], op);
    check_same(ins.front(), ins[i], op);
    check_device(ins[i], op);
    check_contiguous(outs[i], "output", op);
    // The gathered (or scattered) side holds `size` times the other side's elements.
    const Tensor& whole = gather ? outs[i] : ins[i];
    const Tensor& piece = gather ? ins[i] : outs[i];
    DTR_CHECK(whole.numel() == piece.numel() * size(),
              "{}: pair {} of {}: expected an {} of {} elements ({} elements of the {} x {} ranks), got {} "
              "elements (shape {}) on rank {}",
              op, i, ins.size(), gather ? "output" : "input", piece.numel() * size(), piece.numel(),
              gather ? "input" : "output", size(), whole.numel(), shape_str(whole.sizes()), rank_);
    inputs.push_back(ins[i].contiguous());
  }
  return inputs;
}

namespace {

int64_t nbytes_of(const std::vector<Tensor>& tensors) {
  int64_t bytes = 0;
  for (const Tensor& t : tensors) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

}  // namespace

WorkPtr ProcessGroup::issue_each_coalesced(size_t pairs, const std::function<WorkPtr(size_t)>& issue_one,
                                           const CollectiveCall& call) {
  bool already = false;
  {
    std::lock_guard lock(mutex_);
    already = coalescing_;
  }
  if (!already) do_start_coalescing();
  std::vector<WorkPtr> parts;
  try {
    for (size_t i = 0; i < pairs; ++i) parts.push_back(issue_one(i));
  } catch (...) {
    if (!already) do_end_coalescing();
    throw;
  }
  if (!already) do_end_coalescing();
  return make_work_list(std::move(parts), describe(call));
}

WorkPtr ProcessGroup::do_all_gather_coalesced(const std::vector<Tensor>& outs, const std::vector<Tensor>& ins,
                                              const CollectiveCall& call) {
  return issue_each_coalesced(ins.size(), [&](size_t i) { return do_all_gather(outs[i], ins[i], call); }, call);
}

WorkPtr ProcessGroup::do_reduce_scatter_coalesced(const std::vector<Tensor>& outs, const std::vector<Tensor>& ins,
                                                  ReduceOp op, const CollectiveCall& call) {
  return issue_each_coalesced(
      ins.size(), [&](size_t i) { return do_reduce_scatter(outs[i], ins[i], op, call); }, call);
}

WorkPtr ProcessGroup::all_gather_into_tensor_coalesced(const std::vector<Tensor>& outs,
                                                       const std::vector<Tensor>& ins) {
  profiler::Span span("comm", "all_gather");
  constexpr std::string_view op = "all_gather_into_tensor_coalesced";
  std::vector<Tensor> inputs = check_coalesced(outs, ins, /*gather=*/true, op);
  auto call = begin_collective(span, describe_coalesced_call(CollectiveKind::all_gather, 0, inputs, outs),
                               nbytes_of(inputs));
  return finish_issue(do_all_gather_coalesced(outs, inputs, call), call, span);
}

WorkPtr ProcessGroup::reduce_scatter_tensor_coalesced(const std::vector<Tensor>& outs, const std::vector<Tensor>& ins,
                                                      ReduceOp op) {
  profiler::Span span("comm", "reduce_scatter");
  constexpr std::string_view name = "reduce_scatter_tensor_coalesced";
  std::vector<Tensor> inputs = check_coalesced(outs, ins, /*gather=*/false, name);
  check_reduce_op(op, inputs.front().dtype(), name);
  auto call = begin_collective(span, describe_coalesced_call(CollectiveKind::reduce_scatter, 0, inputs, outs, op),
                               nbytes_of(inputs));
  return finish_issue(do_reduce_scatter_coalesced(outs, inputs, op, call), call, span);
}

WorkPtr ProcessGroup::all_reduce(const Tensor& t, ReduceOp op) {
  profiler::Span span("comm", "all_reduce");
  constexpr std::string_view name = "all_reduce";
  check_defined(t, "input", name);
  check_device(t, name);
  check_contiguous(t, "in-place", name);
  check_reduce_op(op, t.dtype(), name);
  auto call = begin_collective(span, CollectiveKind::all_reduce, t, {}, op);
  return finish_issue(do_all_reduce(t, op, call), call, span);
}

WorkPtr ProcessGroup::broadcast(const Tensor& t, int root) {
  profiler::Span span("comm", "broadcast");
  constexpr std::string_view name = "broadcast";
  check_defined(t, "input", name);
  check_device(t, name);
  check_contiguous(t, "in-place", name);
  DTR_CHECK(root >= 0 && root < size(), "broadcast: root {} is not a rank of group {}", root, describe());
  auto call = begin_collective(span, CollectiveKind::broadcast, t, {}, std::nullopt, root);
  return finish_issue(do_broadcast(t, root, call), call, span);
}

WorkPtr ProcessGroup::all_to_all_single(const Tensor& out, const Tensor& in, std::vector<int64_t> out_splits,
                                        std::vector<int64_t> in_splits) {
  profiler::Span span("comm", "all_to_all");
  constexpr std::string_view name = "all_to_all_single";
  check_defined(out, "output", name);
  check_defined(in, "input", name);
  check_same(in, out, name);
  check_device(in, name);
  check_contiguous(out, "output", name);
  DTR_CHECK(in.dim() >= 1 && out.dim() >= 1, "{}: expected tensors of at least 1 dim, got input {} output {}",
            name, shape_str(in.sizes()), shape_str(out.sizes()));
  Shape in_row(in.sizes().begin() + 1, in.sizes().end());
  Shape out_row(out.sizes().begin() + 1, out.sizes().end());
  DTR_CHECK(in_row == out_row, "{}: input and output must agree beyond dim 0: input {}, output {}", name,
            shape_str(in.sizes()), shape_str(out.sizes()));
  const int64_t row = numel_of(in_row);
  const bool uneven = !in_splits.empty() || !out_splits.empty();
  auto fill_equal = [&](std::vector<int64_t>& splits, const Tensor& t, std::string_view what) {
    if (!splits.empty()) return;
    DTR_CHECK(t.size(0) % size() == 0,
              "{}: without explicit splits, the {} dim 0 ({}) must divide evenly over {} ranks", name, what,
              t.size(0), size());
    splits.assign(size(), t.size(0) / size());
  };
  fill_equal(in_splits, in, "input");
  fill_equal(out_splits, out, "output");
  auto check_splits = [&](const std::vector<int64_t>& splits, const Tensor& t, std::string_view what) {
    DTR_CHECK(static_cast<int>(splits.size()) == size(), "{}: expected {} {} splits (one per rank), got {}",
              name, size(), what, splits.size());
    DTR_CHECK(std::all_of(splits.begin(), splits.end(), [](int64_t s) { return s >= 0; }),
              "{}: {} splits must not be negative, got {}", name, what, fmt::join(splits, ", "));
    int64_t total = std::accumulate(splits.begin(), splits.end(), int64_t{0});
    DTR_CHECK(total == t.size(0), "{}: {} splits [{}] add up to {}, but dim 0 of the {} is {}", name, what,
              fmt::join(splits, ", "), total, what, t.size(0));
  };
  check_splits(in_splits, in, "input");
  check_splits(out_splits, out, "output");
  std::vector<int64_t> in_counts(in_splits.size()), out_counts(out_splits.size());
  for (size_t r = 0; r < in_splits.size(); ++r) {
    in_counts[r] = in_splits[r] * row;
    out_counts[r] = out_splits[r] * row;
  }
  Tensor input = in.contiguous();
  auto call = begin_collective(span, CollectiveKind::all_to_all, input, out);
  if (uneven) call.uneven_splits = 1;
  return finish_issue(do_all_to_all(out, input, out_counts, in_counts, call), call, span);
}

WorkPtr ProcessGroup::barrier() {
  profiler::Span span("comm", "barrier");
  auto call = begin_collective(span, CollectiveKind::barrier, {}, {});
  return finish_issue(do_barrier(call), call, span);
}

WorkPtr ProcessGroup::send(const Tensor& t, int dst, int tag) {
  profiler::Span span("comm", "send");
  check_defined(t, "input", "send");
  check_device(t, "send");
  DTR_CHECK(dst >= 0 && dst < size(), "send: destination {} is not a rank of group {}", dst, describe());
  DTR_CHECK(tag >= 0 && tag <= kMaxTag, "send: expected a tag in [0, {}], got {}", kMaxTag, tag);
  Tensor input = t.contiguous();
  auto call = begin_collective(span, CollectiveKind::send, input, {}, std::nullopt, dst);
  return finish_issue(do_send(input, dst, tag, call), call, span);
}

WorkPtr ProcessGroup::recv(const Tensor& t, int src, int tag) {
  profiler::Span span("comm", "recv");
  check_defined(t, "output", "recv");
  check_device(t, "recv");
  check_contiguous(t, "output", "recv");
  DTR_CHECK(src >= 0 && src < size(), "recv: source {} is not a rank of group {}", src, describe());
  DTR_CHECK(tag >= 0 && tag <= kMaxTag, "recv: expected a tag in [0, {}], got {}", kMaxTag, tag);
  auto call = begin_collective(span, CollectiveKind::recv, {}, t, std::nullopt, src);
  return finish_issue(do_recv(t, src, tag, call), call, span);
}

void ProcessGroup::start_coalescing() {
  {
    std::lock_guard lock(mutex_);
    DTR_CHECK(!coalescing_, "start_coalescing on group {}: already coalescing (nested calls)", describe());
    coalescing_ = true;
    coalesced_.clear();
  }
  do_start_coalescing();
}

WorkPtr ProcessGroup::end_coalescing() {
  profiler::Span span("comm", "end_coalescing");
  std::vector<WorkPtr> parts;
  {
    std::lock_guard lock(mutex_);
    DTR_CHECK(coalescing_, "end_coalescing on group {}: start_coalescing was not called", describe());
    coalescing_ = false;
    parts.swap(coalesced_);
  }
  do_end_coalescing();
  auto description = fmt::format("{} coalesced collectives on {}", parts.size(), describe());
  span.arg("collectives", static_cast<int64_t>(parts.size())).str_arg("group", profile_name_);
  WorkPtr work = make_work_list(std::move(parts), std::move(description));
  if (span.active()) {  // its wait() records one wait for all of them
    work->profile_name_ = "coalesced";
    work->profile_group_ = profile_name_;
  }
  return work;
}

std::shared_ptr<ProcessGroup> ProcessGroup::split(int color, int key, std::string name) {
  DTR_CHECK(!name.empty(), "split of group {}: the new group needs a name", describe());
  return do_split(color, key, std::move(name));
}

std::shared_ptr<ProcessGroup> ProcessGroup::new_subgroup(const std::vector<int>& ranks, std::string name) {
  std::set<int> seen;
  for (int r : ranks) {
    DTR_CHECK(r >= 0 && r < size(), "new_subgroup '{}': rank {} is not a rank of group {}", name, r, describe());
    DTR_CHECK(seen.insert(r).second, "new_subgroup '{}': rank {} is listed twice in [{}]", name, r,
              fmt::join(ranks, ", "));
  }
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  int color = it == ranks.end() ? -1 : 0;
  int key = it == ranks.end() ? 0 : static_cast<int>(it - ranks.begin());
  return split(color, key, std::move(name));
}

}  // namespace dtr::mesh
