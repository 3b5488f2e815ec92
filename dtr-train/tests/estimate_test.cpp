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
