// Internal to the f32 GEMM (gemm_packed.cpp): packing where a micro-panel runs across
// the stored rows, i.e. a transpose. interleave_rows() writes
//   dst[p * width + r] = r < count ? src[r * ld + p] : 0     for p < kc, r < width,
// a block of 16 x 16 (avx512) or 8 x 8 (avx2) values at a time through a transpose in
// registers; the baseline level and the ends of k go value by value. This is how op(A)
// is packed when A is stored as op(A) (rows of A along k) and op(B) when B is stored
// transposed (a linear layer's weight).
#pragma once

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>

namespace dtr::kernels::cpu::detail {

// dst[p * width + r] for p in [p_begin, p_end), one value at a time.
inline void interleave_values(const float* src, int64_t ld, int64_t count, int64_t p_begin,
                              int64_t p_end, float* dst, int width) {
  for (int64_t p = p_begin; p < p_end; ++p) {
    float* out = dst + p * width;
    for (int64_t r = 0; r < count; ++r) out[r] = src[r * ld + p];
    std::fill(out + count, out + width, 0.0f);
  }
}

#if defined(__AVX512F__)
inline constexpr int kTransposeBlock = 16;

// The 16 x 16 block in r[] transposed in place: r[i] lane j becomes r[j] lane i.
inline void transpose_block(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
  }
}

// Rows [0, rows) of a block: rows < count are loaded from src, the others zero.
inline void load_block(const float* src, int64_t ld, int64_t count, __m512 r[16]) {
  for (int i = 0; i < 16; ++i) r[i] = i < count ? _mm512_loadu_ps(src + i * ld) : _mm512_setzero_ps();
}

// The first `lanes` values of each transposed row to dst, row stride `width`.
inline void store_block(const __m512 r[16], int lanes, float* dst, int width) {
  const __mmask16 mask = static_cast<__mmask16>((1u << lanes) - 1);
  for (int q = 0; q < 16; ++q) _mm512_mask_storeu_ps(dst + q * width, mask, r[q]);
}
#elif defined(__AVX2__)
inline constexpr int kTransposeBlock = 8;

inline void transpose_block(__m256 r[8]) {
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
    t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
  }
  for (int i = 0; i < 8; ++i) r[i] = t[i];
}

inline void load_block(const float* src, int64_t ld, int64_t count, __m256 r[8]) {
  for (int i = 0; i < 8; ++i) r[i] = i < count ? _mm256_loadu_ps(src + i * ld) : _mm256_setzero_ps();
}

inline void store_block(const __m256 r[8], int lanes, float* dst, int width) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), lane);
  for (int q = 0; q < 8; ++q) _mm256_maskstore_ps(dst + q * width, mask, r[q]);
}
#endif

inline void interleave_rows(const float* src, int64_t ld, int64_t count, int64_t kc, float* dst,
                            int width) {
#if defined(__AVX512F__) || defined(__AVX2__)
  constexpr int kBlock = kTransposeBlock;
  const int64_t p_blocked = kc / kBlock * kBlock;
  for (int r0 = 0; r0 < width; r0 += kBlock) {
    const int lanes = std::min(kBlock, width - r0);
    const int64_t rows = std::clamp<int64_t>(count - r0, 0, lanes);
    for (int64_t p0 = 0; p0 < p_blocked; p0 += kBlock) {
#if defined(__AVX512F__)
      __m512 block[kBlock];
#else
      __m256 block[kBlock];
#endif
      load_block(src + r0 * ld + p0, ld, rows, block);
      transpose_block(block);
      store_block(block, lanes, dst + p0 * width + r0, width);
    }
  }
  interleave_values(src, ld, count, p_blocked, kc, dst, width);
#else
  interleave_values(src, ld, count, 0, kc, dst, width);
#endif
}

}  // namespace dtr::kernels::cpu::detail
