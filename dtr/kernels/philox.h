// Counter-based random numbers: the one place that says which Philox4x32-10
// output (Random123's philox4x32_R(10, counter, key)) every element of a random
// fill uses. Everything is a pure function of (seed, offset, i), where i is the
// element's linear index in the *logical* row-major tensor, so a shard, a box or
// a strided view of that tensor gets exactly the values a fill of the whole
// tensor puts there, on any rank, with any thread count, on host or device.
//
// The scheme (words are uint32; lo32/hi32 are the low/high halves of a uint64):
//   key     = {lo32(seed), hi32(seed)}
//   counter = {lo32(block), hi32(block), lo32(offset), hi32(offset)}
//   w[0..3] = philox4x32_R(10, counter, key)
// and element i takes:
//   uniform_float(i)   block = i / 4, word w[i % 4]:  u = (w >> 8) * 2^-24, in [0, 1)
//   uniform_double(i)  block = i / 2, k = i % 2, x = w[2k] | (uint64)w[2k+1] << 32:
//                      u = (x >> 11) * 2^-53, in [0, 1)
//   normal_float(i)    pair p = i / 2, block = p / 2 (= i / 4), k = p % 2:
//                      u1 = ((w[2k] >> 8) + 1) * 2^-24 in (0, 1]  (never 0: log(u1) is finite)
//                      u2 = (w[2k+1] >> 8) * 2^-24 in [0, 1)
//                      r = sqrt(-2 log u1), t = 2 pi u2, all in float;
//                      z = r cos t for even i, r sin t for odd i (Box-Muller: the pair
//                      shares u1 and u2)
//   normal_double(i)   pair p = i / 2, block = p:
//                      u1 = ((x01 >> 11) + 1) * 2^-53 in (0, 1], x01 = w[0] | (uint64)w[1] << 32
//                      u2 = (x23 >> 11) * 2^-53 in [0, 1),    x23 = w[2] | (uint64)w[3] << 32
//                      r = sqrt(-2 log u1), t = 2 pi u2, in double; z = r cos t / r sin t as above
// A fill never uses a block index at or beyond ceil(numel / 2), so a generator
// that moves its offset by philox_offset_advance(numel) after each fill (or by
// anything >= 1, since the offset has counter words of its own) never reuses a
// counter.
//
// The float functions compute in float; bf16 and f16 fills use them and round
// once. Host results are bit-exact across builds of one compiler and libm; a
// device's logf/cosf may differ from the host's in the last ulp.
#pragma once

#include "dtr/kernels/host_device.h"

#include <Random123/philox.h>

#include <cmath>
#include <cstdint>

namespace dtr::kernels {

// What one fill draws from: the generator's seed and its offset at the time of the fill.
struct PhiloxStream {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// The four words of Philox counter `block` of `stream`.
struct PhiloxBlock {
  uint32_t w[4];
};

DTR_HOST_DEVICE inline PhiloxBlock philox_block(PhiloxStream stream, uint64_t block) {
  philox4x32_key_t key = {{static_cast<uint32_t>(stream.seed),
                           static_cast<uint32_t>(stream.seed >> 32)}};
  philox4x32_ctr_t ctr = {{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                           static_cast<uint32_t>(stream.offset),
                           static_cast<uint32_t>(stream.offset >> 32)}};
  philox4x32_ctr_t out = philox4x32_R(10, ctr, key);
  return {{out.v[0], out.v[1], out.v[2], out.v[3]}};
}

// How far one fill of a logical tensor of `numel` elements moves a generator's
// offset: ceil(numel / 2), the blocks the widest draws (two words per element) use.
DTR_HOST_DEVICE constexpr uint64_t philox_offset_advance(uint64_t numel) {
  return numel / 2 + numel % 2;
}

// --- words to numbers ---

// [0, 1) from the top 24 bits of a word.
DTR_HOST_DEVICE inline float word_to_uniform_float(uint32_t w) {
  return static_cast<float>(w >> 8) * 0x1p-24f;
}

// (0, 1] from the top 24 bits of a word: a Box-Muller radius input that is never 0.
DTR_HOST_DEVICE inline float word_to_open_uniform_float(uint32_t w) {
  return static_cast<float>((w >> 8) + 1) * 0x1p-24f;
}

DTR_HOST_DEVICE inline uint64_t join_words(uint32_t lo, uint32_t hi) {
  return static_cast<uint64_t>(lo) | (static_cast<uint64_t>(hi) << 32);
}

// [0, 1) from the top 53 bits of two words (lo, hi).
DTR_HOST_DEVICE inline double words_to_uniform_double(uint32_t lo, uint32_t hi) {
  return static_cast<double>(join_words(lo, hi) >> 11) * 0x1p-53;
}

// (0, 1] from the top 53 bits of two words (lo, hi).
DTR_HOST_DEVICE inline double words_to_open_uniform_double(uint32_t lo, uint32_t hi) {
  return static_cast<double>((join_words(lo, hi) >> 11) + 1) * 0x1p-53;
}

// The two standard normals of one Box-Muller pair: z[0] for the even element, z[1] for the odd.
struct FloatPair {
  float z[2];
};
struct DoublePair {
  double z[2];
};

DTR_HOST_DEVICE inline FloatPair box_muller_float(uint32_t w_radius, uint32_t w_angle) {
  float r = ::sqrtf(-2.0f * ::logf(word_to_open_uniform_float(w_radius)));
  float t = 6.2831853071795864769f * word_to_uniform_float(w_angle);
  return {{r * ::cosf(t), r * ::sinf(t)}};
}

DTR_HOST_DEVICE inline DoublePair box_muller_double(const PhiloxBlock& b) {
  double r = ::sqrt(-2.0 * ::log(words_to_open_uniform_double(b.w[0], b.w[1])));
  double t = 6.2831853071795864769 * words_to_uniform_double(b.w[2], b.w[3]);
  return {{r * ::cos(t), r * ::sin(t)}};
}

// --- per element: the scheme above, one element at a time ---

DTR_HOST_DEVICE inline float uniform_float(PhiloxStream stream, uint64_t i) {
  return word_to_uniform_float(philox_block(stream, i / 4).w[i % 4]);
}

DTR_HOST_DEVICE inline double uniform_double(PhiloxStream stream, uint64_t i) {
  PhiloxBlock b = philox_block(stream, i / 2);
  unsigned k = static_cast<unsigned>(i % 2);
  return words_to_uniform_double(b.w[2 * k], b.w[2 * k + 1]);
}

DTR_HOST_DEVICE inline float normal_float(PhiloxStream stream, uint64_t i) {
  PhiloxBlock b = philox_block(stream, i / 4);
  unsigned k = static_cast<unsigned>((i / 2) % 2);
  return box_muller_float(b.w[2 * k], b.w[2 * k + 1]).z[i % 2];
}

DTR_HOST_DEVICE inline double normal_double(PhiloxStream stream, uint64_t i) {
  return box_muller_double(philox_block(stream, i / 2)).z[i % 2];
}

}  // namespace dtr::kernels
