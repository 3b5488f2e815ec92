// dtr/kernels/int_divider.h: IntDivider32's quotients and remainders against plain
// `/` and `%` for small divisors, powers of two and their neighbours, random
// divisors up to 2^31, and the dividends at the edges of its range; and its magic
// numbers against the bound the exactness proof rests on. In CUDA builds, also
// StridedIndexer::offsets (dtr/kernels/cuda/strided_indexer.cuh) on the host: the
// 32-bit path against the 64-bit one for random shapes and strides.
#include "dtr/kernels/int_divider.h"

#ifdef DTR_WITH_CUDA
#include "dtr/kernels/cuda/strided_indexer.cuh"
#endif

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

using dtr::kernels::DivMod32;
using dtr::kernels::IntDivider32;

namespace {

constexpr uint64_t kTwo31 = uint64_t{1} << 31;

// Counts mismatches instead of one CHECK per pair, so a failure names the first
// bad pair and the test stays fast over millions of pairs.
struct Checker {
  uint64_t checked = 0;
  uint64_t failures = 0;
  uint32_t bad_d = 0, bad_n = 0, bad_q = 0, bad_r = 0;

  void check(const IntDivider32& div, uint32_t n) {
    const uint32_t d = div.divisor();
    const DivMod32 qr = div.divmod(n);
    ++checked;
    if (qr.quot != n / d || qr.rem != n % d || div.div(n) != n / d) {
      if (failures++ == 0) bad_d = d, bad_n = n, bad_q = qr.quot, bad_r = qr.rem;
    }
  }
};

// The dividends every divisor is checked with: the small ones, the ones around d,
// the largest multiples of d in range and their neighbours, the top of the range,
// and random values.
void check_divisor(Checker& c, uint32_t d, std::mt19937_64& rng, int random_dividends) {
  const IntDivider32 div(d);
  const uint64_t max_n = IntDivider32::kMaxDividend;
  std::vector<uint64_t> ns = {0, 1, 2, 3, d - 1u, d, uint64_t{d} + 1, 2 * uint64_t{d} - 1,
                              2 * uint64_t{d}, max_n, max_n - 1, max_n - 2, kTwo31 - 1};
  const uint64_t top = max_n / d * d;  // the largest multiple of d in range
  for (uint64_t n : {top - 1, top, top + 1, top - d, top - d + 1}) ns.push_back(n);
  std::uniform_int_distribution<uint64_t> any_n(0, max_n);
  for (int i = 0; i < random_dividends; ++i) ns.push_back(any_n(rng));
  for (uint64_t n : ns) {
    if (n <= max_n) c.check(div, static_cast<uint32_t>(n));
  }
}

std::vector<uint32_t> powers_of_two_and_neighbours() {
  std::vector<uint32_t> ds;
  for (int s = 0; s <= 31; ++s) {
    const uint64_t p = uint64_t{1} << s;
    for (int64_t delta = -2; delta <= 2; ++delta) {
      const int64_t d = static_cast<int64_t>(p) + delta;
      if (d >= 1 && static_cast<uint64_t>(d) <= IntDivider32::kMaxDivisor) {
        ds.push_back(static_cast<uint32_t>(d));
      }
    }
  }
  return ds;
}

// Granlund & Montgomery's condition, with M = 2^32 + m the full multiplier:
// 2^(32+s) <= M * d <= 2^(32+s) + 2^s, and 2^(s-1) < d <= 2^s. Exact in 128 bits.
bool magic_in_bound(const IntDivider32& div) {
  const unsigned __int128 d = div.divisor();
  const uint32_t s = div.shift();
  if (s > 31) return false;
  if (d > (uint64_t{1} << s) || (s > 0 && d <= (uint64_t{1} << (s - 1)))) return false;
  if (div.magic() == 0) return false;
  const unsigned __int128 big_m = (static_cast<unsigned __int128>(1) << 32) + div.magic();
  const unsigned __int128 lo = static_cast<unsigned __int128>(1) << (32 + s);
  const unsigned __int128 md = big_m * d;
  return md >= lo && md <= lo + (uint64_t{1} << s);
}

}  // namespace

TEST_CASE("IntDivider32 default divides by one", "[int_divider]") {
  const IntDivider32 div;
  CHECK(div.divisor() == 1u);
  for (uint32_t n : {0u, 1u, 12345u, 0x7fffffffu, 0x80000000u}) {
    CHECK(div.div(n) == n);
    CHECK(div.divmod(n).rem == 0u);
  }
}

TEST_CASE("IntDivider32 magic numbers for divisors 1 and powers of two", "[int_divider]") {
  for (uint32_t s = 0; s <= 31; ++s) {
    const IntDivider32 div(uint32_t{1} << s);
    CHECK(div.shift() == s);
    CHECK(div.magic() == 1u);  // q = (umulhi(n, 1) + n) >> s = n >> s
  }
  static_assert(IntDivider32(1).magic() == 1 && IntDivider32(1).shift() == 0);
  static_assert(IntDivider32(3).shift() == 2 && IntDivider32(3).magic() == 0x55555556u);
  static_assert(IntDivider32(7).shift() == 3 && IntDivider32(7).magic() == 0x24924925u);
  static_assert(IntDivider32(0x80000000u).shift() == 31);
}

TEST_CASE("IntDivider32 matches / and % for divisors 1 to 5000", "[int_divider]") {
  std::mt19937_64 rng(1);
  Checker c;
  for (uint32_t d = 1; d <= 5000; ++d) {
    check_divisor(c, d, rng, 64);
    // Every dividend below 4d: each quotient 0..3 and each remainder.
    const IntDivider32 div(d);
    if (d <= 1000) {
      for (uint32_t n = 0; n < 4 * d; ++n) c.check(div, n);
    }
  }
  INFO("first mismatch: " << c.bad_n << " / " << c.bad_d << " gave q=" << c.bad_q
                          << " r=" << c.bad_r);
  CHECK(c.failures == 0);
  CHECK(c.checked > 2'000'000);
}

TEST_CASE("IntDivider32 matches / and % for powers of two and their neighbours",
          "[int_divider]") {
  std::mt19937_64 rng(2);
  Checker c;
  for (uint32_t d : powers_of_two_and_neighbours()) check_divisor(c, d, rng, 2000);
  INFO("first mismatch: " << c.bad_n << " / " << c.bad_d << " gave q=" << c.bad_q
                          << " r=" << c.bad_r);
  CHECK(c.failures == 0);
  CHECK(c.checked > 300'000);
}

TEST_CASE("IntDivider32 matches / and % for random divisors up to 2^31", "[int_divider]") {
  std::mt19937_64 rng(3);
  Checker c;
  std::uniform_int_distribution<uint32_t> any_d(1, IntDivider32::kMaxDivisor);
  for (int i = 0; i < 20000; ++i) check_divisor(c, any_d(rng), rng, 32);
  // Divisors spread over every bit length (any_d mostly draws 30- and 31-bit ones).
  for (int bits = 1; bits <= 31; ++bits) {
    std::uniform_int_distribution<uint32_t> d_of_len(uint32_t{1} << (bits - 1),
                                                     (uint32_t{1} << bits) - 1);
    for (int i = 0; i < 500; ++i) check_divisor(c, d_of_len(rng), rng, 32);
  }
  INFO("first mismatch: " << c.bad_n << " / " << c.bad_d << " gave q=" << c.bad_q
                          << " r=" << c.bad_r);
  CHECK(c.failures == 0);
  CHECK(c.checked > 1'000'000);
}

TEST_CASE("IntDivider32 magic numbers satisfy the exactness bound", "[int_divider]") {
  // The bound makes the quotient exact for every dividend below 2^32 (see the
  // header); the 32-bit add then limits dividends to 2^31.
  std::mt19937_64 rng(4);
  uint64_t bad = 0, first_bad = 0;
  auto check = [&](uint32_t d) {
    if (!magic_in_bound(IntDivider32(d)) && bad++ == 0) first_bad = d;
  };
  for (uint32_t d = 1; d <= 1'000'000; ++d) check(d);
  for (uint32_t d : powers_of_two_and_neighbours()) check(d);
  std::uniform_int_distribution<uint32_t> any_d(1, IntDivider32::kMaxDivisor);
  for (int i = 0; i < 1'000'000; ++i) check(any_d(rng));
  for (uint32_t d = IntDivider32::kMaxDivisor - 100'000; d <= IntDivider32::kMaxDivisor; ++d) {
    check(d);
  }
  INFO("first divisor out of bound: " << first_bad);
  CHECK(bad == 0);
}

#ifdef DTR_WITH_CUDA

namespace {

using dtr::kernels::cuda::kMaxIndexerDims;
using dtr::kernels::cuda::StridedIndexer;

// Offsets of `linear` the 32-bit way (as built) and the 64-bit way (use32 off).
template <int K>
void check_paths(const StridedIndexer<K>& ix, int64_t linear, uint64_t& failures) {
  int64_t fast[K], slow[K];
  ix.offsets(linear, fast);
  StridedIndexer<K> ix64 = ix;
  ix64.use32 = false;
  ix64.offsets(linear, slow);
  for (int k = 0; k < K; ++k) {
    if (fast[k] != slow[k]) ++failures;
  }
}

template <int K>
void random_shapes(std::mt19937_64& rng, int shapes) {
  uint64_t failures = 0, checked = 0;
  for (int t = 0; t < shapes; ++t) {
    const int nd = std::uniform_int_distribution<int>(1, kMaxIndexerDims)(rng);
    std::vector<int64_t> shape(static_cast<size_t>(nd));
    int64_t numel = 1;
    for (int d = 0; d < nd; ++d) {
      // Sizes up to what keeps numel within INT32_MAX: small ones, mid-sized ones,
      // and ones of any bit length up to the room left (so dims larger than 2^16
      // and numel near 2^31 occur).
      const int64_t room = std::numeric_limits<int32_t>::max() / numel;
      int64_t cap = room;
      if (t % 3 == 0) {
        cap = std::min<int64_t>(room, 7);
      } else if (t % 3 == 1) {
        cap = std::min<int64_t>(room, 3000);
      } else {
        const int bits = std::uniform_int_distribution<int>(1, 31)(rng);
        cap = std::min<int64_t>(room, (int64_t{1} << bits) - 1);
      }
      shape[d] = std::uniform_int_distribution<int64_t>(1, std::max<int64_t>(cap, 1))(rng);
      numel *= shape[d];
    }
    std::array<std::vector<int64_t>, K> strides;
    std::array<const int64_t*, K> stride_ptrs{};
    for (int k = 0; k < K; ++k) {
      strides[k].resize(static_cast<size_t>(nd));
      for (int d = 0; d < nd; ++d) {
        // Broadcast (0), small, negative, and large enough that index * stride
        // passes 2^32.
        switch (std::uniform_int_distribution<int>(0, 4)(rng)) {
          case 0: strides[k][d] = 0; break;
          case 1: strides[k][d] = std::uniform_int_distribution<int64_t>(1, 100)(rng); break;
          case 2: strides[k][d] = -std::uniform_int_distribution<int64_t>(1, 100)(rng); break;
          case 3: strides[k][d] = int64_t{1} << std::uniform_int_distribution<int>(20, 40)(rng);
            break;
          default: strides[k][d] = std::uniform_int_distribution<int64_t>(1, 1 << 30)(rng); break;
        }
      }
      stride_ptrs[k] = strides[k].data();
    }
    const auto ix = StridedIndexer<K>::make(nd, shape.data(), stride_ptrs);
    REQUIRE(ix.use32);
    std::uniform_int_distribution<int64_t> any_linear(0, numel - 1);
    for (int64_t linear : {int64_t{0}, int64_t{1}, numel / 2, numel - 2, numel - 1}) {
      if (linear < 0) continue;
      check_paths(ix, linear, failures);
      ++checked;
    }
    for (int i = 0; i < 200; ++i) {
      check_paths(ix, any_linear(rng), failures);
      ++checked;
    }
  }
  INFO("K = " << K << ", " << checked << " indices checked");
  CHECK(failures == 0);
}

}  // namespace

TEST_CASE("StridedIndexer 32-bit offsets match the 64-bit path", "[int_divider]") {
  std::mt19937_64 rng(5);
  random_shapes<1>(rng, 2000);
  random_shapes<2>(rng, 2000);
  random_shapes<3>(rng, 1000);
  random_shapes<4>(rng, 1000);
}

TEST_CASE("StridedIndexer takes the 32-bit path up to INT32_MAX elements", "[int_divider]") {
  const int64_t contiguous[1] = {1};
  const int64_t max32[1] = {std::numeric_limits<int32_t>::max()};
  const auto small = StridedIndexer<1>::make(1, max32, {contiguous});
  CHECK(small.use32);
  const int64_t two31[1] = {int64_t{1} << 31};
  CHECK_FALSE(StridedIndexer<1>::make(1, two31, {contiguous}).use32);
  const int64_t empty[2] = {0, 5};
  const int64_t strides2[2] = {5, 1};
  CHECK_FALSE(StridedIndexer<1>::make(2, empty, {strides2}).use32);

  // Dividends near the top of the range: numel = 2^31 - 2 (2^31 - 1 is prime, so no
  // 2-D shape has INT32_MAX elements), with outer strides that keep both dims.
  const int64_t half = (int64_t{1} << 30) - 1;
  const int64_t shapes[2][2] = {{2, half}, {half, 2}};
  for (const auto& shape : shapes) {
    const int64_t strides[2] = {3 * shape[1] + 1, 3};
    const auto ix = StridedIndexer<1>::make(2, shape, {strides});
    REQUIRE(ix.use32);
    REQUIRE(ix.ndim == 2);
    const int64_t numel = shape[0] * shape[1];
    REQUIRE(numel == std::numeric_limits<int32_t>::max() - 1);
    for (int64_t linear : {int64_t{0}, shape[1] - 1, shape[1], numel - shape[1] - 1,
                           numel - shape[1], numel - 2, numel - 1}) {
      int64_t off[1];
      ix.offsets(linear, off);
      CHECK(off[0] == linear / shape[1] * strides[0] + linear % shape[1] * strides[1]);
    }
  }
}

TEST_CASE("StridedIndexer stays well within the 4 KiB kernel parameter limit", "[int_divider]") {
  // The largest indexer in use: where() (out, cond, a, b); the kernel's other
  // parameters (functor, pointers) need room too.
  STATIC_REQUIRE(sizeof(StridedIndexer<4>) <= 1024);
}

#endif  // DTR_WITH_CUDA
