// dtr-train --estimate-only (dtr-train/estimate.h) and its flags: --world-size
// plans for that many ranks (and is refused without --estimate-only), the
// micro-batch defaults to max(1, global / ranks) without the divisibility rule,
// and the report for the llama-7b shape names its parameter count (computed here
// from the shape) and rank 0's shard at 64 ranks, built on the meta device only.
#include "cli.h"
#include "parse_args.h"
#include "estimate.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <string>
#include <vector>

using dtr::train::testing::parse_args;

namespace {

}  // namespace

TEST_CASE("dtr-train --estimate-only --world-size plans for that many ranks", "[train][cli]") {
  const auto r = parse_args({"--estimate-only", "--model", "llama-7b", "--world-size", "64"}, 1);
  REQUIRE(r.config.has_value());
  CHECK(r.config->estimate_only);
  CHECK(r.config->world_size == 64);
  CHECK(r.config->micro_batch == 1);  // the default global batch 16 is smaller than 64 ranks
  const auto bad = parse_args({"--world-size", "4"}, 1);
  REQUIRE_FALSE(bad.config.has_value());
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.message, Catch::Contains("--world-size"));
  const auto negative = parse_args({"--estimate-only", "--world-size", "-1"}, 1);
  CHECK(negative.exit_code == 2);
}

TEST_CASE("dtr-train --estimate-only report for llama-7b at 64 ranks: parameters, rank 0's shard, no allocation",
          "[train]") {
  const auto r = parse_args({"--estimate-only", "--model", "llama-7b", "--world-size", "64", "--seq-len", "2048"}, 1);
  REQUIRE(r.config.has_value());
  const std::string report = dtr::train::estimate_report(*r.config);
  const int64_t V = 32000, D = 4096, L = 32, F = 11008;
  const int64_t params = 2 * V * D + L * (4 * D * D + 3 * D * F + 2 * D) + D;
  CHECK(params == 6738415616);
  CHECK_THAT(report, Catch::Contains(fmt::format("{} parameters", params)));
  CHECK_THAT(report, Catch::Contains("on 64 rank(s)"));
  CHECK_THAT(report, Catch::Contains("micro-batch 1 x 2048 tokens"));
  // 64 divides 32000, 4096 and 11008: rank 0 holds exactly 1/64 of the f32 parameters.
  CHECK_THAT(report, Catch::Contains(fmt::format("{:>16} B", params * 4 / 64)));
  CHECK_THAT(report, Catch::Contains("per-rank memory estimate (GiB): 64 ranks"));
  CHECK_THAT(report, Catch::Contains("allocated while estimating: peak"));
}

TEST_CASE("dtr-train --estimate-only --tp 8 at 64 ranks: rank 0 holds its split blocks' 1/8 over 8 FSDP ranks",
          "[train]") {
  const int64_t V = 32000, D = 4096, L = 32, F = 11008;
  // The blocks' matrices are split 8 ways by tensor parallelism, then sharded 8
  // ways by FSDP; the embedding, the head and the norms stay whole under the plan
  // and are sharded 8 ways. --loss-parallel splits the embedding and head too.
  const int64_t blocks = L * (4 * D * D + 3 * D * F), whole = 2 * V * D + L * 2 * D + D;
  for (const bool loss_parallel : {false, true}) {
    std::vector<std::string> args = {"--estimate-only", "--model", "llama-7b", "--world-size", "64", "--tp", "8",
                                     "--seq-len", "2048"};
    if (loss_parallel) args.emplace_back("--loss-parallel");
    const auto r = parse_args(args, 1);
    REQUIRE(r.config.has_value());
    const std::string report = dtr::train::estimate_report(*r.config);
    INFO(report);
    const int64_t rank0 = loss_parallel ? (blocks + 2 * V * D) / 64 + (L * 2 * D + D) / 8 : blocks / 64 + whole / 8;
    CHECK_THAT(report, Catch::Contains("6738415616 parameters"));
    CHECK_THAT(report, Catch::Contains(fmt::format("on 64 rank(s): tensor parallel 8{} x FSDP over 8 ranks",
                                                   loss_parallel ? " (loss parallel)" : "")));
    CHECK_THAT(report, Catch::Contains(fmt::format("  params          {:>16} B", rank0 * 4)));
    CHECK_THAT(report, Catch::Contains("per-rank memory estimate (GiB): 8 ranks"));
  }
  // The split activation model keeps less per rank than one rank's whole blocks
  // at the same micro-batch: the same job without --tp on 8 ranks.
  const auto tp = parse_args({"--estimate-only", "--model", "llama-7b", "--world-size", "64", "--tp", "8",
                              "--micro-batch", "1", "--seq-len", "2048"}, 1);
  const auto fsdp = parse_args({"--estimate-only", "--model", "llama-7b", "--world-size", "8", "--micro-batch", "1",
                                "--seq-len", "2048"}, 1);
  REQUIRE(tp.config.has_value());
  REQUIRE(fsdp.config.has_value());
  auto activations = [](const std::string& report) {
    const auto at = report.find("  activations");
    REQUIRE(at != std::string::npos);
    return std::stoll(report.substr(report.find_first_of("0123456789", at)));
  };
  CHECK(activations(dtr::train::estimate_report(*tp.config)) < activations(dtr::train::estimate_report(*fsdp.config)));
}
