// dtr/kernels/philox.h: Philox4x32-10 against Random123's published known answers, and the
// documented counter scheme (which words each element takes) against a reference
// written here from the header comment, calling Random123 directly.
#include "dtr/kernels/philox.h"

#include <catch2/catch.hpp>

#include <Random123/philox.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>

using namespace dtr::kernels;

namespace {

struct Kat {
  std::array<uint32_t, 4> ctr;
  std::array<uint32_t, 2> key;
  std::array<uint32_t, 4> expected;
};

// The philox4x32 10 lines of Random123's examples/kat_vectors (Random123 1.09 and later;
// columns: counter[4], key[2], expected output[4], all hex uint32).
constexpr std::array<Kat, 3> kKats = {{
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000},
     {0x00000000, 0x00000000},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
}};

uint64_t join(uint32_t lo, uint32_t hi) { return uint64_t{lo} | (uint64_t{hi} << 32); }

// The scheme of dtr/kernels/philox.h, written out again from its header comment.
std::array<uint32_t, 4> ref_words(uint64_t seed, uint64_t offset, uint64_t block) {
  philox4x32_key_t key = {{uint32_t(seed & 0xffffffffu), uint32_t(seed >> 32)}};
  philox4x32_ctr_t ctr = {{uint32_t(block & 0xffffffffu), uint32_t(block >> 32),
                           uint32_t(offset & 0xffffffffu), uint32_t(offset >> 32)}};
  philox4x32_ctr_t r = philox4x32_R(10, ctr, key);
  return {r.v[0], r.v[1], r.v[2], r.v[3]};
}

float ref_uniform_float(uint64_t seed, uint64_t offset, uint64_t i) {
  uint32_t w = ref_words(seed, offset, i / 4)[i % 4];
  return std::ldexp(static_cast<float>(w >> 8), -24);
}

double ref_uniform_double(uint64_t seed, uint64_t offset, uint64_t i) {
  auto w = ref_words(seed, offset, i / 2);
  uint64_t x = join(w[2 * (i % 2)], w[2 * (i % 2) + 1]);
  return std::ldexp(static_cast<double>(x >> 11), -53);
}

float ref_normal_float(uint64_t seed, uint64_t offset, uint64_t i) {
  uint64_t pair = i / 2;
  auto w = ref_words(seed, offset, pair / 2);
  uint32_t wr = w[2 * (pair % 2)], wt = w[2 * (pair % 2) + 1];
  float u1 = std::ldexp(static_cast<float>((wr >> 8) + 1), -24);
  float u2 = std::ldexp(static_cast<float>(wt >> 8), -24);
  float r = std::sqrt(-2.0f * std::log(u1));
  float t = static_cast<float>(2 * std::numbers::pi) * u2;
  return i % 2 == 0 ? r * std::cos(t) : r * std::sin(t);
}

double ref_normal_double(uint64_t seed, uint64_t offset, uint64_t i) {
  auto w = ref_words(seed, offset, i / 2);
  double u1 = std::ldexp(static_cast<double>((join(w[0], w[1]) >> 11) + 1), -53);
  double u2 = std::ldexp(static_cast<double>(join(w[2], w[3]) >> 11), -53);
  double r = std::sqrt(-2.0 * std::log(u1));
  double t = 2 * std::numbers::pi * u2;
  return i % 2 == 0 ? r * std::cos(t) : r * std::sin(t);
}

}  // namespace

TEST_CASE("philox4x32-10 matches Random123's published known-answer vectors", "[random][philox]") {
  for (const Kat& kat : kKats) {
    // Random123 itself, as installed.
    philox4x32_ctr_t ctr = {{kat.ctr[0], kat.ctr[1], kat.ctr[2], kat.ctr[3]}};
    philox4x32_key_t key = {{kat.key[0], kat.key[1]}};
    philox4x32_ctr_t r = philox4x32_R(10, ctr, key);
    for (int k = 0; k < 4; ++k) CHECK(r.v[k] == kat.expected[k]);
    // dtr's wrapper: key = seed, counter words 0-1 = block, 2-3 = offset (low word first).
    PhiloxStream stream{.seed = join(kat.key[0], kat.key[1]),
                        .offset = join(kat.ctr[2], kat.ctr[3])};
    PhiloxBlock b = philox_block(stream, join(kat.ctr[0], kat.ctr[1]));
    for (int k = 0; k < 4; ++k) CHECK(b.w[k] == kat.expected[k]);
  }
}

TEST_CASE("words map to uniforms with 24 and 53 random bits", "[random][philox]") {
  CHECK(word_to_uniform_float(0) == 0.0f);
  CHECK(word_to_uniform_float(0xffffffffu) == 1.0f - 0x1p-24f);
  CHECK(word_to_uniform_float(0x80000000u) == 0.5f);
  CHECK(word_to_uniform_float(0x000000ffu) == 0.0f);  // the low 8 bits are dropped
  CHECK(word_to_open_uniform_float(0) == 0x1p-24f);
  CHECK(word_to_open_uniform_float(0xffffffffu) == 1.0f);
  CHECK(words_to_uniform_double(0, 0) == 0.0);
  CHECK(words_to_uniform_double(0xffffffffu, 0xffffffffu) == 1.0 - 0x1p-53);
  CHECK(words_to_uniform_double(0, 0x80000000u) == 0.5);          // the high word is the top half
  CHECK(words_to_uniform_double(0x00000800u, 0) == 0x1p-53);      // bit 11 is the lowest kept bit
  CHECK(words_to_uniform_double(0x000007ffu, 0) == 0.0);          // bits 0-10 are dropped
  CHECK(words_to_open_uniform_double(0, 0) == 0x1p-53);
  CHECK(words_to_open_uniform_double(0xffffffffu, 0xffffffffu) == 1.0);
}

TEST_CASE("Box-Muller never takes log(0) and gives the extreme radius for a zero word",
          "[random][philox]") {
  // Radius word 0 -> u1 = 2^-24 -> r = sqrt(48 ln 2); angle word 0 -> t = 0.
  FloatPair zf = box_muller_float(0, 0);
  CHECK(std::isfinite(zf.z[0]));
  CHECK(zf.z[0] == Approx(std::sqrt(48 * std::log(2.0))).epsilon(1e-6));
  CHECK(zf.z[1] == 0.0f);
  // Radius word all ones -> u1 = 1 -> r = 0.
  CHECK(box_muller_float(0xffffffffu, 0x12345678u).z[0] == 0.0f);
  // An angle of a quarter turn (u2 = 0.25) puts the radius on the sine branch.
  FloatPair q = box_muller_float(0, 0x40000000u);
  CHECK(q.z[0] == Approx(0.0).margin(1e-5));
  CHECK(q.z[1] == Approx(std::sqrt(48 * std::log(2.0))).epsilon(1e-6));
  DoublePair zd = box_muller_double(PhiloxBlock{{0, 0, 0, 0}});
  CHECK(zd.z[0] == Approx(std::sqrt(106 * std::log(2.0))).epsilon(1e-14));
  CHECK(zd.z[1] == 0.0);
}

TEST_CASE("per-element draws follow the documented counter scheme bit for bit",
          "[random][philox]") {
  const std::array<PhiloxStream, 3> streams = {
      {{0, 0}, {42, 7}, {0x0123456789abcdefULL, 1ULL << 40}}};
  for (PhiloxStream s : streams) {
    for (uint64_t i : {0ULL, 1ULL, 2ULL, 3ULL, 4ULL, 5ULL, 6ULL, 7ULL, 1001ULL, (1ULL << 33) + 3}) {
      INFO("seed " << s.seed << " offset " << s.offset << " i " << i);
      CHECK(uniform_float(s, i) == ref_uniform_float(s.seed, s.offset, i));
      CHECK(uniform_double(s, i) == ref_uniform_double(s.seed, s.offset, i));
      CHECK(normal_float(s, i) == ref_normal_float(s.seed, s.offset, i));
      CHECK(normal_double(s, i) == ref_normal_double(s.seed, s.offset, i));
    }
  }
}

TEST_CASE("elements sharing a Box-Muller pair take its cosine and sine branch",
          "[random][philox]") {
  PhiloxStream s{.seed = 5, .offset = 3};
  for (uint64_t pair = 0; pair < 50; ++pair) {
    // z_even^2 + z_odd^2 = r^2 = -2 log u1 for the pair's radius word.
    auto w = ref_words(5, 3, pair / 2);
    double u1 = std::ldexp(static_cast<double>((w[2 * (pair % 2)] >> 8) + 1), -24);
    double e = normal_float(s, 2 * pair), o = normal_float(s, 2 * pair + 1);
    CHECK(e * e + o * o == Approx(-2 * std::log(u1)).epsilon(1e-5).margin(1e-6));
  }
}

TEST_CASE("a fill moves the offset by ceil(numel / 2)", "[random][philox]") {
  CHECK(philox_offset_advance(0) == 0);
  CHECK(philox_offset_advance(1) == 1);
  CHECK(philox_offset_advance(2) == 1);
  CHECK(philox_offset_advance(5) == 3);
  CHECK(philox_offset_advance(1ULL << 40) == 1ULL << 39);
}
