// Internal to the f32 GEMM (gemm_packed.cpp): the register tile of the instruction-set
// level this copy of the kernels is compiled for, and the micro-kernel that fills it.
//
// The micro-kernel multiplies one packed micro-panel of op(A) (kc x kTileRows, stored
// k-major: kTileRows values per k) by one packed micro-panel of op(B) (kc x kTileCols,
// kTileCols values per k) into kTileRows x kTileCols accumulators held in vector
// registers, one FMA per accumulator vector and k, in k order. Every element of C is
// therefore summed the same way wherever its tile lies, edge tiles included, so that
// cutting C among threads never changes a result.
//
// Tiles per level (accumulators + the B vectors of one k + one broadcast A value must fit
// the register file): avx512 12 x 32 (24 + 2 + 1 of 32 zmm), avx2 6 x 16 (12 + 2 + 1 of
// 16 ymm), baseline 4 x 8 (8 + 2 + 2 of 16 xmm; SSE2 has no FMA: multiply, then add).
#pragma once

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <cstdint>
#include <cstring>

namespace dtr::kernels::cpu::detail {

#if defined(__AVX512F__)
struct F32Vector {
  using V = __m512;
  static constexpr int kLanes = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V broadcast(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }  // a * b + c, rounded once
};
inline constexpr int kTileRows = 12;
#elif defined(__AVX2__) && defined(__FMA__)
struct F32Vector {
  using V = __m256;
  static constexpr int kLanes = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V broadcast(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
};
inline constexpr int kTileRows = 6;
#else
// The baseline level (SSE2 on x86-64, any architecture elsewhere): GCC's portable
// vectors of 4 floats.
struct F32Vector {
  using V = float __attribute__((vector_size(16)));
  static constexpr int kLanes = 4;
  static V zero() { return V{}; }
  static V broadcast(float x) { return V{x, x, x, x}; }
  static V load(const float* p) {
    V v;
    std::memcpy(&v, p, sizeof(V));
    return v;
  }
  static void store(float* p, V v) { std::memcpy(p, &v, sizeof(V)); }
  static V mul(V a, V b) { return a * b; }
  static V add(V a, V b) { return a + b; }
  static V fma(V a, V b, V c) { return a * b + c; }  // rounded twice: no contraction at any level
};
inline constexpr int kTileRows = 4;
#endif

inline constexpr int kTileVectors = 2;  // vectors per tile row
inline constexpr int kTileCols = kTileVectors * F32Vector::kLanes;

// A tile at the bottom edge of C runs the micro-kernel for the rows it has, rounded
// up to a multiple of kEdgeRowStep (a third of the tile, or half at the baseline),
// not a full kTileRows: C of 256 rows ends in a tile of 4 rows at avx512, which
// costs a third of a full one.
inline constexpr int kEdgeRowStep = kTileRows % 3 == 0 ? kTileRows / 3 : kTileRows / 2;

// How the accumulated products meet C: C = alpha * acc + beta * C, where beta == 0
// writes C without reading it.
struct TileStore {
  float alpha = 1.0f;
  float beta = 0.0f;
};

// C[0:Rows, 0:kTileCols] (row stride ldc) = store.alpha * a_panel . b_panel +
// store.beta * C, over kc values of k: the first Rows rows of a full micro-panel of
// op(A) (kTileRows values per k). Each accumulator's sum is the same for any Rows.
template <int Rows = kTileRows>
[[gnu::noinline]] void multiply_tile(int64_t kc, const float* __restrict a_panel,
                                     const float* __restrict b_panel, float* c, int64_t ldc,
                                     TileStore store) {
  static_assert(Rows > 0 && Rows <= kTileRows);
  using Vec = F32Vector;
  Vec::V acc[Rows][kTileVectors];
#pragma GCC unroll 16
  for (int i = 0; i < Rows; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < kTileVectors; ++v) acc[i][v] = Vec::zero();
  }
  // The B micro-panel streams from L2: fetch it kPrefetchSteps values of k ahead.
  constexpr int kPrefetchSteps = 8;
#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; ++p) {
#pragma GCC unroll 4
    for (int v = 0; v < kTileCols; v += 16) {  // one cache line (16 floats) at a time
      __builtin_prefetch(b_panel + kPrefetchSteps * kTileCols + v);
    }
    Vec::V b[kTileVectors];
#pragma GCC unroll 4
    for (int v = 0; v < kTileVectors; ++v) b[v] = Vec::load(b_panel + v * Vec::kLanes);
#pragma GCC unroll 16
    for (int i = 0; i < Rows; ++i) {
      const Vec::V a = Vec::broadcast(a_panel[i]);
#pragma GCC unroll 4
      for (int v = 0; v < kTileVectors; ++v) acc[i][v] = Vec::fma(a, b[v], acc[i][v]);
    }
    a_panel += kTileRows;
    b_panel += kTileCols;
  }
  const Vec::V alpha = Vec::broadcast(store.alpha);
  const Vec::V beta = Vec::broadcast(store.beta);
#pragma GCC unroll 16
  for (int i = 0; i < Rows; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < kTileVectors; ++v) {
      float* out = c + i * ldc + v * Vec::kLanes;
      Vec::V r = store.alpha == 1.0f ? acc[i][v] : Vec::mul(alpha, acc[i][v]);
      if (store.beta != 0.0f) {
        r = Vec::add(r, store.beta == 1.0f ? Vec::load(out) : Vec::mul(beta, Vec::load(out)));
      }
      Vec::store(out, r);
    }
  }
}

}  // namespace dtr::kernels::cpu::detail
