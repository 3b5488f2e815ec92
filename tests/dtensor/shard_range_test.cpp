// shard_range: torch.chunk's split of n rows into k chunks, worked out by hand.
#include "dtr/dtensor/dtensor_spec.h"

#include <catch2/catch.hpp>

using dtr::shard_range;

namespace {

std::vector<std::pair<int64_t, int64_t>> ranges(int64_t n, int64_t k) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t i = 0; i < k; ++i) {
    auto r = shard_range(n, k, i);
    out.emplace_back(r.offset, r.length);
  }
  return out;
}

}  // namespace

TEST_CASE("shard_range follows torch.chunk: ceil(n/k) rows each, trailing chunks shorter or empty") {
  using V = std::vector<std::pair<int64_t, int64_t>>;
  REQUIRE(ranges(8, 4) == V{{0, 2}, {2, 2}, {4, 2}, {6, 2}});
  REQUIRE(ranges(7, 3) == V{{0, 3}, {3, 3}, {6, 1}});
  REQUIRE(ranges(7, 4) == V{{0, 2}, {2, 2}, {4, 2}, {6, 1}});
  REQUIRE(ranges(2, 4) == V{{0, 1}, {1, 1}, {2, 0}, {2, 0}});
  REQUIRE(ranges(5, 4) == V{{0, 2}, {2, 2}, {4, 1}, {5, 0}});
  REQUIRE(ranges(0, 3) == V{{0, 0}, {0, 0}, {0, 0}});
  REQUIRE(dtr::padded_shard_length(7, 4) == 2);
  REQUIRE(dtr::padded_shard_length(5, 4) == 2);
}
