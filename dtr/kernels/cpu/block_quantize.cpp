#include "dtr/kernels/cpu/block_quantize.h"

#include "dtr/kernels/block_quantize.h"
#include "dtr/kernels/cpu/parallel.h"
#include "dtr/kernels/scalar_types.h"

#include <algorithm>

namespace dtr::kernels::cpu::DTR_CPU_LEVEL {

namespace {

// Blocks per parallel chunk: about kParallelGrain elements.
int64_t blocks_per_chunk(int64_t block) { return std::max<int64_t>(1, kParallelGrain / block); }

}  // namespace

template <class T>
void block_quantize(const T* x, int64_t n, int64_t block, int bits, uint8_t* codes, float* absmax) {
  const int qmax = block_quantize_qmax(bits);
  const int64_t blocks = (n + block - 1) / block;
  parallel_for(0, blocks, blocks_per_chunk(block), [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const int64_t begin = b * block, end = std::min(n, begin + block);
      float largest = 0.0f;
      for (int64_t i = begin; i < end; ++i) largest = std::max(largest, block_magnitude(static_cast<float>(x[i])));
      const float m = block_absmax_of(largest);
      absmax[b] = m;
      if (bits == 8) {
        for (int64_t i = begin; i < end; ++i) {
          codes[i] = static_cast<uint8_t>(static_cast<int8_t>(block_quantize_value(static_cast<float>(x[i]), m, qmax)));
        }
      } else {
        for (int64_t i = begin; i < end; i += 2) {
          const unsigned low = static_cast<unsigned>(block_quantize_value(static_cast<float>(x[i]), m, qmax)) & 0xFu;
          const unsigned high =
              i + 1 < end ? static_cast<unsigned>(block_quantize_value(static_cast<float>(x[i + 1]), m, qmax)) & 0xFu
                          : 0u;
          codes[i / 2] = static_cast<uint8_t>(low | (high << 4));
        }
      }
    }
  });
}

template <class T>
void block_dequantize(const uint8_t* codes, const float* absmax, int64_t n, int64_t block, int bits, T* out) {
  const int qmax = block_quantize_qmax(bits);
  const int64_t blocks = (n + block - 1) / block;
  parallel_for(0, blocks, blocks_per_chunk(block), [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const int64_t begin = b * block, end = std::min(n, begin + block);
      const float m = absmax[b];
      for (int64_t i = begin; i < end; ++i) {
        const int q = bits == 8 ? static_cast<int>(static_cast<int8_t>(codes[i]))
                                : int4_from_nibble(codes[i / 2] >> (i % 2 == 0 ? 0 : 4));
        out[i] = convert<T>(block_dequantize_value(q, m, qmax));
      }
    }
  });
}

#define DTR_INSTANTIATE_BLOCK_QUANTIZE(T)                                                      \
  template void block_quantize<T>(const T*, int64_t, int64_t, int, uint8_t*, float*); \
  template void block_dequantize<T>(const uint8_t*, const float*, int64_t, int64_t, int, T*);
DTR_INSTANTIATE_BLOCK_QUANTIZE(float)
DTR_INSTANTIATE_BLOCK_QUANTIZE(::dtr::bf16)

}  // namespace dtr::kernels::cpu::DTR_CPU_LEVEL
