// dtr-train's DistributedSampler (dtr-train/sampler.h): every global batch is
// split into disjoint per-rank slices covering it exactly, epochs cover every
// sample once, the order is deterministic from the seed and changes with the
// epoch, and set_position resumes exactly.
#include "sampler.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <vector>

using dtr::train::DistributedSampler;

TEST_CASE("DistributedSampler slices of a global batch are disjoint and cover it", "[train][sampler]") {
  for (const int world : {1, 2, 3, 4}) {
    const int64_t global = 12, samples = 100;
    std::vector<DistributedSampler> ranks;
    for (int r = 0; r < world; ++r) ranks.emplace_back(samples, global, r, world, 7);
    for (int64_t b = 0; b < 3 * ranks[0].batches_per_epoch(); ++b) {  // three epochs
      const int64_t epoch = ranks[0].epoch(), batch = ranks[0].position() % ranks[0].batches_per_epoch();
      std::vector<int64_t> all;
      for (auto& s : ranks) {
        const auto mine = s.next();
        REQUIRE(static_cast<int64_t>(mine.size()) == global / world);
        all.insert(all.end(), mine.begin(), mine.end());
      }
      REQUIRE(all == ranks[0].global_batch_indices(epoch, batch));
      REQUIRE(std::set<int64_t>(all.begin(), all.end()).size() == static_cast<size_t>(global));
      for (const int64_t i : all) REQUIRE((i >= 0 && i < samples));
    }
  }
}

TEST_CASE("DistributedSampler epoch visits every sample at most once and drops only the remainder", "[train][sampler]") {
  DistributedSampler s(50, 8, 0, 1, 3);
  REQUIRE(s.batches_per_epoch() == 6);
  std::vector<int64_t> seen;
  for (int b = 0; b < 6; ++b) {
    const auto v = s.next();
    seen.insert(seen.end(), v.begin(), v.end());
  }
  REQUIRE(s.epoch() == 1);
  std::sort(seen.begin(), seen.end());
  REQUIRE(std::unique(seen.begin(), seen.end()) == seen.end());
  REQUIRE(seen.size() == 48);
}

TEST_CASE("DistributedSampler order is deterministic from the seed and shuffled per epoch", "[train][sampler]") {
  DistributedSampler a(1000, 10, 1, 2, 42), b(1000, 10, 1, 2, 42), c(1000, 10, 1, 2, 43);
  const auto a0 = a.next(), b0 = b.next(), c0 = c.next();
  REQUIRE(a0 == b0);
  REQUIRE(a0 != c0);
  REQUIRE(a.global_batch_indices(0, 0) != a.global_batch_indices(1, 0));
  a.set_epoch(1);
  b.set_epoch(1);
  REQUIRE(a.next() == b.next());
  DistributedSampler plain(20, 4, 0, 2, 1, /*shuffle=*/false);
  REQUIRE(plain.next() == std::vector<int64_t>{0, 1});
}

TEST_CASE("DistributedSampler set_position resumes exactly where position left off", "[train][sampler]") {
  DistributedSampler run(97, 6, 1, 3, 11);
  for (int i = 0; i < 23; ++i) run.next();  // past the first epoch (16 batches)
  const int64_t pos = run.position();
  REQUIRE(pos == 23);
  REQUIRE(run.epoch() == 1);
  std::vector<std::vector<int64_t>> expected;
  for (int i = 0; i < 20; ++i) expected.push_back(run.next());

  DistributedSampler resumed(97, 6, 1, 3, 11);
  resumed.set_position(pos);
  REQUIRE(resumed.epoch() == 1);
  for (int i = 0; i < 20; ++i) REQUIRE(resumed.next() == expected[static_cast<size_t>(i)]);
  REQUIRE(resumed.position() == run.position());
}

TEST_CASE("DistributedSampler rejects a batch not divisible by ranks and too few samples", "[train][sampler]") {
  REQUIRE_THROWS_AS(DistributedSampler(100, 10, 0, 3, 0), std::invalid_argument);
  REQUIRE_THROWS_AS(DistributedSampler(5, 8, 0, 2, 0), std::invalid_argument);
  REQUIRE_THROWS_AS(DistributedSampler(100, 8, 2, 2, 0), std::invalid_argument);
}
