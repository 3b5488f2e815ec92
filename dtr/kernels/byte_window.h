// byte_window16: the 16 bytes that start `shift` bytes into two adjacent 16-byte
// chunks, as four little-endian 32-bit words. CUDA row kernels read a row whose start
// is not 16-byte aligned as the aligned chunks around it, two 16-byte loads per
// vector instead of one load per element, and cut each vector out with this
// (dtr/kernels/cuda/block_reduce.cuh). Host and device code alike, so that the CPU tests
// check it.
#pragma once

#include "dtr/kernels/host_device.h"

#include <cstdint>

namespace dtr::kernels {

// out = bytes [shift, shift + 16) of the 32 bytes lo, hi; shift in [0, 16).
DTR_HOST_DEVICE inline void byte_window16(const uint32_t (&lo)[4], const uint32_t (&hi)[4], unsigned shift,
                                          uint32_t (&out)[4]) {
  const uint32_t w[8] = {lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]};
  const unsigned word = shift / 4, bits = (shift % 4) * 8;
  // b[k] = w[k + word] for k = 0..4, chosen by two rounds of selects on word's bits:
  // indexing w by a run-time value would put it in local memory on a GPU.
  uint32_t a[7], b[5];
  for (int j = 0; j < 7; ++j) a[j] = (word & 1u) ? w[j + 1] : w[j];
  for (int j = 0; j < 5; ++j) b[j] = (word & 2u) ? a[j + 2] : a[j];
  for (int k = 0; k < 4; ++k) {
    out[k] = static_cast<uint32_t>(((uint64_t{b[k + 1]} << 32) | b[k]) >> bits);  // a funnel shift
  }
}

}  // namespace dtr::kernels
