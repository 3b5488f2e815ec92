// The step profiler (dtr/tensor/profiler.h) on a real FSDP model at world sizes 1-4:
// the tiny 2-block Transformer, fully_shard on each block (reshard_after_forward
// = true) and on the root (its default: the root keeps its parameters after
// forward), trained for 2 steps with the profiler on. Each rank's trace file is
// valid Chrome trace JSON whose spans nest on every thread and whose async
// in-flight pairs match, and its collective counts equal what the model's
// wrapping implies (derived here from the FSDP groups' reshard settings, and
// cross-checked against the process group's own call counters):
//   per step, every group that reshards after forward is all-gathered twice
//   (forward, and again before its backward), the root once (it stays unsharded
//   from its forward through its backward, then reshards after backward), and
//   every group reduce-scatters its gradients once.
// With the profiler off the same step records nothing and writes no file.
#include "dtr/fsdp/fully_shard.h"
#include "dtr/mesh/distributed.h"
#include "tests/support/mpi_test_util.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/profiler.h"
#include "tests/support/tiny_transformer.h"

#include "tests/support/trace_check.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

using namespace dtr;
using dtr::testing::kSeq;
namespace fs = std::filesystem;
using dtr::testing::world;

namespace {

constexpr int kSteps = 2;

std::shared_ptr<nn::Transformer> sharded_tiny_model() {
  auto model = testing::make_model(7);
  for (auto& layer : model->layers()) fsdp::fully_shard(*layer, {.reshard_after_forward = true});
  fsdp::fully_shard(*model);  // the root: reshard_after_forward unset, i.e. false for the root
  return model;
}

void train_step(nn::Module& model, nn::optim::Optimizer& opt, int step) {
  const int64_t batch = 2;
  std::vector<int64_t> tokens, targets;
  for (int64_t i = 0; i < batch * kSeq; ++i) {
    tokens.push_back((i * 5 + step + distributed::rank()) % 32);
    targets.push_back((i * 3 + 1) % 32);
  }
  Tensor logits = model(from_vector(tokens, {batch, kSeq}));
  Tensor loss = cross_entropy(logits.reshape({-1, logits.size(-1)}), from_vector(targets, {batch * kSeq}));
  loss.backward();
  opt.step();
  opt.zero_grad();
}

bool env_profiling() {
  if (std::getenv("DTR_PROFILE") == nullptr) return false;
  WARN("DTR_PROFILE is set: the profiler tests start and stop the profiler themselves; skipped");
  return true;
}

}  // namespace

TEST_CASE("profiler trace of a 2-block FSDP model over 2 steps: valid nested JSON per rank, 2 all-gathers per "
          "resharded block, 1 for the root and 1 reduce-scatter per group each step") {
  if (env_profiling()) return;
  const int rank = distributed::rank();
  auto model = sharded_tiny_model();
  nn::optim::AdamW opt(model->parameters(), {.lr = 1e-2});

  // The expectation, from the model's wrapping: FSDP groups and their reshard setting.
  // On the CPU the collectives move shards and gradients in place; only a group
  // with a shard shorter than its segment on this rank pads it at each all-gather,
  // and only one with rows that do not divide over the ranks pads its gradients at
  // each reduce-scatter (dtr/fsdp/flat_collectives.h).
  const int64_t world_size = distributed::world_size();
  int64_t groups = 0, all_gathers_per_step = 0, gather_paddings_per_step = 0, reduce_paddings_per_step = 0;
  std::string group_name;
  for (auto& [path, m] : model->named_modules()) {
    if (!fsdp::is_fully_sharded(*m)) continue;
    const fsdp::FSDPModule handle = fsdp::fsdp_module(*m);
    const auto& setting = handle.options().reshard_after_forward;
    const bool is_root = path.empty();
    const bool reshards = setting ? std::get<bool>(*setting) : !is_root;
    all_gathers_per_step += reshards ? 2 : 1;
    int64_t shard_numel = 0;
    bool uneven = false;
    for (const auto& [name, param] : handle.sharded_parameters()) {
      shard_numel += param.to_local().numel();
      uneven = uneven || param.shape()[0] % world_size != 0;
    }
    gather_paddings_per_step += shard_numel != handle.shard_numel_padded() ? (reshards ? 2 : 1) : 0;
    reduce_paddings_per_step += uneven ? 1 : 0;
    ++groups;
    group_name = handle.mesh().group(0)->name();
  }
  REQUIRE(groups == 3);
  REQUIRE(all_gathers_per_step == 5);
  // One rank computes on its shards: no collective, and the reduction is a scaling.
  const bool communicates = distributed::world_size() > 1;
  if (!communicates) all_gathers_per_step = gather_paddings_per_step = reduce_paddings_per_step = 0;
  const int64_t reduce_scatters_per_step = communicates ? groups : 0;
  const mesh::ProcessGroupPtr fsdp_group = fsdp::fsdp_module(*model).mesh().group(0);

  const fs::path dir = dtr::testing::fresh_shared_dir("profiler_tests", "fsdp_two_steps");
  profiler::start({.path = (dir / "trace.json").string(), .print_summary = false});
  REQUIRE(profiler::running());
  fsdp_group->reset_stats();
  for (int step = 0; step < kSteps; ++step) train_step(*model, opt, step);
  const mesh::CommStats stats = fsdp_group->stats();
  const std::string written = profiler::stop();
  REQUIRE_FALSE(profiler::running());

  // The process group's counters agree with the model-derived expectation.
  CHECK(stats.calls[static_cast<int>(mesh::CollectiveKind::all_gather)] == kSteps * all_gathers_per_step);
  CHECK(stats.calls[static_cast<int>(mesh::CollectiveKind::reduce_scatter)] == kSteps * reduce_scatters_per_step);

  REQUIRE(written == (dir / fmt::format("trace.rank{}.json", rank)).string());
  REQUIRE(fs::is_regular_file(written));
  std::ifstream in(written);
  nlohmann::json doc;
  REQUIRE_NOTHROW(doc = nlohmann::json::parse(in));
  const testing::TraceCheck trace = testing::check_trace(doc, rank);
  for (const auto& e : trace.errors) UNSCOPED_INFO(e);
  REQUIRE(trace.errors.empty());
  REQUIRE(trace.metadata >= 3);  // process name, sort index, the main thread's name

  // Collectives: issue and wait spans, and the in-flight intervals, on the FSDP group.
  CHECK(trace.count("comm", "all_gather", group_name) == kSteps * all_gathers_per_step);
  CHECK(trace.count("comm_wait", "all_gather", group_name) == kSteps * all_gathers_per_step);
  CHECK(trace.count("comm", "reduce_scatter", group_name) == kSteps * reduce_scatters_per_step);
  CHECK(trace.count("comm_wait", "reduce_scatter", group_name) == kSteps * reduce_scatters_per_step);
  CHECK(trace.count("comm", "all_gather") == kSteps * all_gathers_per_step);  // no other group gathers
  auto inflight = [&](const std::string& kind) {
    auto it = trace.async_counts.find({"comm_inflight", kind});
    return it == trace.async_counts.end() ? int64_t{0} : it->second;
  };
  CHECK(inflight("all_gather") == kSteps * all_gathers_per_step);
  CHECK(inflight("reduce_scatter") == kSteps * reduce_scatters_per_step);
  // FSDP's copies: no flat buffer to copy into or out of, the padding counted above,
  // and one copy-out (the shards' rows into their .grad) per reduce-scatter.
  CHECK(trace.count("fsdp", "all_gather copy_in") == 0);
  CHECK(trace.count("fsdp", "all_gather copy_out") == 0);
  CHECK(trace.count("fsdp", "reduce_scatter copy_in") == 0);
  CHECK(trace.count("fsdp", "all_gather padding") == kSteps * gather_paddings_per_step);
  CHECK(trace.count("fsdp", "reduce_scatter padding") == kSteps * reduce_paddings_per_step);
  CHECK(trace.count("fsdp", "reduce_scatter copy_out") == kSteps * reduce_scatters_per_step);
  CHECK(trace.count("fsdp", "reduce on shards") == kSteps * (groups - reduce_scatters_per_step));
  CHECK(trace.count("fsdp", "post_backward") == kSteps * groups);
  // Module spans, named by path once FSDP's lazy init ran with the profiler on.
  for (const std::string name : {"Transformer", "layers.0 (TransformerBlock)", "layers.1 (TransformerBlock)",
                                 "layers.1.attn (Attention)", "tok_embeddings (Embedding)"}) {
    INFO(name);
    CHECK(trace.count("forward", name) == kSteps);
    CHECK(trace.count("backward", name) == kSteps);
  }
  CHECK(trace.count("optim", "optimizer step") == kSteps);

  // The table: the same counts, and percentages of the profiled wall time.
  const auto stats_rows = profiler::top_spans();
  auto row = std::find_if(stats_rows.begin(), stats_rows.end(),
                          [](const profiler::SpanStat& s) { return s.category == "comm" && s.name == "all_gather"; });
  if (communicates) {
    REQUIRE(row != stats_rows.end());
    CHECK(row->count == kSteps * all_gathers_per_step);
    CHECK(row->mean_ms == Approx(row->total_ms / static_cast<double>(row->count)));
  } else {
    CHECK(row == stats_rows.end());
  }
  auto root = std::find_if(stats_rows.begin(), stats_rows.end(), [](const profiler::SpanStat& s) {
    return s.category == "forward" && s.name == "Transformer";
  });
  REQUIRE(root != stats_rows.end());
  CHECK(root->percent_of_wall > 0);
  CHECK(root->percent_of_wall < 100);
  const std::string table = profiler::summary_table(10);
  CHECK(table.find("% wall") != std::string::npos);
  CHECK(table.find(fmt::format("profile (rank {})", rank)) != std::string::npos);
  profiler::clear();
  CHECK(profiler::event_count() == 0);
}

TEST_CASE("profiler off: an FSDP training step records no event and writes no trace file") {
  if (env_profiling()) return;
  REQUIRE_FALSE(profiler::running());
  profiler::clear();
  auto model = sharded_tiny_model();
  nn::optim::AdamW opt(model->parameters(), {.lr = 1e-2});
  const fs::path dir = dtr::testing::fresh_shared_dir("profiler_tests", "off");
  for (int step = 0; step < kSteps; ++step) train_step(*model, opt, step);
  CHECK(profiler::event_count() == 0);
  CHECK(profiler::events().empty());
  CHECK(profiler::stop().empty());  // not running: nothing to write
  profiler::finalize();
  world()->barrier()->wait();
  CHECK(fs::is_empty(dir));
}
