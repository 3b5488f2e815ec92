// dtr/kernels/byte_window.h: every shift of a 16-byte window over two chunks against
// the bytes memcpy reads from the same place in memory.
#include "dtr/kernels/byte_window.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>

using dtr::kernels::byte_window16;

TEST_CASE("byte_window16 cuts the 16 bytes at every shift out of two chunks", "[kernels]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    unsigned char bytes[32];
    for (unsigned char& b : bytes) b = static_cast<unsigned char>(rng());
    uint32_t lo[4], hi[4];
    std::memcpy(lo, bytes, 16);
    std::memcpy(hi, bytes + 16, 16);
    for (unsigned shift = 0; shift < 16; ++shift) {
      uint32_t out[4], want[4];
      byte_window16(lo, hi, shift, out);
      std::memcpy(want, bytes + shift, 16);  // little-endian words, as the GPU reads them
      INFO("shift " << shift << ", trial " << trial);
      for (int k = 0; k < 4; ++k) CHECK(out[k] == want[k]);
    }
  }
}

TEST_CASE("byte_window16 at shift 0 is the first chunk and at shift 12 starts with its last word",
          "[kernels]") {
  const uint32_t lo[4] = {0x03020100u, 0x07060504u, 0x0B0A0908u, 0x0F0E0D0Cu};
  const uint32_t hi[4] = {0x13121110u, 0x17161514u, 0x1B1A1918u, 0x1F1E1D1Cu};
  uint32_t out[4];
  byte_window16(lo, hi, 0, out);
  CHECK((out[0] == lo[0] && out[1] == lo[1] && out[2] == lo[2] && out[3] == lo[3]));
  byte_window16(lo, hi, 12, out);
  CHECK((out[0] == 0x0F0E0D0Cu && out[1] == 0x13121110u && out[2] == 0x17161514u && out[3] == 0x1B1A1918u));
  byte_window16(lo, hi, 2, out);
  CHECK((out[0] == 0x05040302u && out[3] == 0x11100F0Eu));
}
