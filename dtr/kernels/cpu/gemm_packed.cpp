#include "dtr/kernels/cpu/gemm_packed.h"

#include "dtr/kernels/cpu/gemm_interleave.h"
#include "dtr/kernels/cpu/gemm_register_tile.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

namespace dtr::kernels::cpu::DTR_CPU_LEVEL {

namespace {

using detail::kTileCols;
using detail::kTileRows;
using detail::TileStore;

// Cache blocking: op(A) in blocks of kBlockRows x kBlockK, op(B) in blocks of kBlockK x
// kBlockCols. An A micro-panel (kBlockK x kTileRows, 12 KiB at avx512) stays in L1
// while the B block's micro-panels stream past it.
// - op(A) packed here is packed again for each block of columns, so blocks are 1024
//   columns (1 MiB) at every level: in L2 on Intel's 2 MiB, streamed from L3 ahead of
//   the micro-kernel's prefetch on AMD's 512 KiB, which measured faster there than
//   packing op(A) twice as often in blocks that fit L2.
// - op(A) packed whole beforehand (a_packed) is read from L3 as well, and then blocks
//   that fit L2 measured faster: kBlockColsPackedA, 1 MiB at avx512, 512 KiB at avx2,
//   256 KiB at the baseline.
constexpr int64_t kBlockK = 256;
constexpr int64_t kBlockRows = kTileRows * 16;
constexpr int64_t kBlockCols = 1024;
constexpr int64_t kBlockColsPackedA = kTileCols * 32;
static_assert(kBlockCols % kTileCols == 0 && kBlockColsPackedA <= kBlockCols);

// A float buffer aligned to a cache line that grows on demand, one per thread and use.
class PackBuffer {
 public:
  float* get(int64_t count) {
    if (count > capacity_) {
      data_.reset(new (std::align_val_t{64}) float[static_cast<size_t>(count)]);
      capacity_ = count;
    }
    return data_.get();
  }

 private:
  struct AlignedDelete {
    void operator()(float* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<float[], AlignedDelete> data_;
  int64_t capacity_ = 0;
};

// dst[p * Width + r] = r < count ? src[p * ld + r] : 0 for p < kc: rows of `count`
// values side by side in the stored matrix, copied (as float) into a panel `Width`
// wide. Full f32 rows copy with a memcpy of constant size, which the compiler
// turns into a few vector moves (a copy of variable length would call memmove per row).
template <int Width, class S>
void copy_rows(const S* src, int64_t ld, int64_t kc, int64_t count, float* dst) {
  if (count == Width) {
    for (int64_t p = 0; p < kc; ++p) {
      if constexpr (std::is_same_v<S, float>) {
        std::memcpy(dst + p * Width, src + p * ld, Width * sizeof(float));
      } else {
        for (int r = 0; r < Width; ++r) dst[p * Width + r] = static_cast<float>(src[p * ld + r]);
      }
    }
    return;
  }
  for (int64_t p = 0; p < kc; ++p) {
    for (int64_t r = 0; r < Width; ++r) dst[p * Width + r] = r < count ? static_cast<float>(src[p * ld + r]) : 0.0f;
  }
}

// detail::interleave_rows for any stored type: bf16 / f16 rows are first widened
// into a float block (at most kTileCols x kBlockK, in L1), then transposed from there.
template <class S>
void interleave_rows(const S* src, int64_t ld, int64_t count, int64_t kc, float* dst, int width) {
  if constexpr (std::is_same_v<S, float>) {
    detail::interleave_rows(src, ld, count, kc, dst, width);
  } else {
    alignas(64) float widened[kTileCols * kBlockK];
    for (int64_t r = 0; r < count; ++r) {
      for (int64_t p = 0; p < kc; ++p) widened[r * kc + p] = static_cast<float>(src[r * ld + p]);
    }
    detail::interleave_rows(widened, kc, count, kc, dst, width);
  }
}

// Rows [i0, i0 + rows) and k [p0, p0 + kc) of op(A) into micro-panels of kTileRows
// rows, each kc x kTileRows k-major, the rows past the edge zero.
template <class S>
void pack_a(Transpose trans, const S* a, int64_t lda, int64_t i0, int64_t rows, int64_t p0, int64_t kc,
            float* dst) {
  for (int64_t ip = 0; ip < rows; ip += kTileRows) {
    const int64_t panel_rows = std::min<int64_t>(kTileRows, rows - ip);
    float* panel = dst + ip * kc;
    if (trans == Transpose::no) {  // op(A)[i, p] = a[i * lda + p]: each row runs along k
      interleave_rows(a + (i0 + ip) * lda + p0, lda, panel_rows, kc, panel, kTileRows);
    } else {  // op(A)[i, p] = a[p * lda + i]: the panel's rows lie side by side
      copy_rows<kTileRows>(a + p0 * lda + i0 + ip, lda, kc, panel_rows, panel);
    }
  }
}

// k [p0, p0 + kc) and columns [j0, j0 + cols) of op(B) into micro-panels of kTileCols
// columns, each kc x kTileCols k-major, the columns past the edge zero.
template <class S>
void pack_b(Transpose trans, const S* b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0, int64_t cols,
            float* dst) {
  for (int64_t jp = 0; jp < cols; jp += kTileCols) {
    const int64_t panel_cols = std::min<int64_t>(kTileCols, cols - jp);
    float* panel = dst + jp * kc;
    if (trans == Transpose::no) {  // op(B)[p, j] = b[p * ldb + j]: the panel's columns side by side
      copy_rows<kTileCols>(b + p0 * ldb + j0 + jp, ldb, kc, panel_cols, panel);
    } else {  // op(B)[p, j] = b[j * ldb + p]: each column runs along k
      interleave_rows(b + (j0 + jp) * ldb + p0, ldb, panel_cols, kc, panel, kTileCols);
    }
  }
}

// The micro-kernel for the first `rows` rows of a tile (rows a multiple of
// kEdgeRowStep, at most kTileRows).
void multiply_rows(int64_t rows, int64_t kc, const float* a_panel, const float* b_panel, float* c,
                   int64_t ldc, TileStore store) {
  constexpr int kStep = detail::kEdgeRowStep;
  switch (rows / kStep) {
    case 1: return detail::multiply_tile<kStep>(kc, a_panel, b_panel, c, ldc, store);
    case 2: return detail::multiply_tile<2 * kStep>(kc, a_panel, b_panel, c, ldc, store);
    default: return detail::multiply_tile<kTileRows>(kc, a_panel, b_panel, c, ldc, store);
  }
}

// C[rows, cols] (+)= packed A block . packed B block, tile by tile. An A micro-panel
// meets every B micro-panel of the block before the next one is read. A tile at the
// bottom edge runs the micro-kernel for its rows rounded up to kEdgeRowStep; edge
// tiles whose rows or columns that rounding does not fit go through a scratch tile.
void multiply_blocks(int64_t rows, int64_t cols, int64_t kc, const float* a_block,
                     const float* b_block, float* c, int64_t ldc, TileStore store) {
  constexpr int64_t kStep = detail::kEdgeRowStep;
  alignas(64) float scratch[kTileRows * kTileCols] = {};
  for (int64_t ir = 0; ir < rows; ir += kTileRows) {
    const int64_t tile_rows = std::min<int64_t>(kTileRows, rows - ir);
    const int64_t kernel_rows = (tile_rows + kStep - 1) / kStep * kStep;
    const float* a_panel = a_block + ir * kc;
    for (int64_t jr = 0; jr < cols; jr += kTileCols) {
      const int64_t tile_cols = std::min<int64_t>(kTileCols, cols - jr);
      const float* b_panel = b_block + jr * kc;
      float* tile = c + ir * ldc + jr;
      if (kernel_rows == tile_rows && tile_cols == kTileCols) {
        multiply_rows(kernel_rows, kc, a_panel, b_panel, tile, ldc, store);
        continue;
      }
      const auto row_bytes = static_cast<size_t>(tile_cols) * sizeof(float);
      if (store.beta != 0.0f) {
        for (int64_t r = 0; r < tile_rows; ++r) std::memcpy(scratch + r * kTileCols, tile + r * ldc, row_bytes);
      }
      multiply_rows(kernel_rows, kc, a_panel, b_panel, scratch, kTileCols, store);
      for (int64_t r = 0; r < tile_rows; ++r) std::memcpy(tile + r * ldc, scratch + r * kTileCols, row_bytes);
    }
  }
}

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// op(A) packed whole, of `padded` rows (rounded up to whole panels), is, for each
// block of k (p0 = 0, kBlockK, ...), all its micro-panels for that block side by
// side, as pack_a lays out the panels of one cache block. The offset of block p0's
// panels from row `first` on:
int64_t whole_offset(int64_t padded, int64_t p0, int64_t kc, int64_t first) { return p0 * padded + first * kc; }

}  // namespace

int64_t packed_a_panels(int64_t m) { return (m + kTileRows - 1) / kTileRows; }
int64_t packed_a_floats(int64_t m, int64_t k) { return round_up(m, kTileRows) * k; }

void pack_whole_a(Transpose trans_a, const float* a, int64_t lda, int64_t m, int64_t k,
                  int64_t panel_begin, int64_t panel_end, float* dst) {
  const int64_t i0 = panel_begin * kTileRows, rows = std::min(m, panel_end * kTileRows) - i0;
  for (int64_t p0 = 0; p0 < k; p0 += kBlockK) {
    const int64_t kc = std::min(kBlockK, k - p0);
    pack_a(trans_a, a, lda, i0, rows, p0, kc, dst + whole_offset(round_up(m, kTileRows), p0, kc, i0));
  }
}

bool packs_a_once(int64_t n) { return n <= kBlockCols; }

float* whole_pack_buffer(int64_t count) {
  thread_local PackBuffer buffer;
  return buffer.get(count);
}

template <class S>
void packed_gemm(Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const S* a, int64_t lda, const S* b, int64_t ldb, float beta, float* c, int64_t ldc,
                 const float* a_packed) {
  thread_local PackBuffer a_buffer, b_buffer;
  float* a_block_buffer =
      a_packed ? nullptr : a_buffer.get(round_up(std::min(m, kBlockRows), kTileRows) * std::min(k, kBlockK));
  const int64_t block_cols = a_packed ? kBlockColsPackedA : kBlockCols;
  float* b_block = b_buffer.get(round_up(std::min(n, block_cols), kTileCols) * std::min(k, kBlockK));
  for (int64_t j0 = 0; j0 < n; j0 += block_cols) {
    const int64_t cols = std::min(block_cols, n - j0);
    for (int64_t p0 = 0; p0 < k; p0 += kBlockK) {
      const int64_t kc = std::min(kBlockK, k - p0);
      pack_b(trans_b, b, ldb, p0, kc, j0, cols, b_block);
      // The first block of k applies beta; later ones add to what it left.
      const TileStore store{.alpha = alpha, .beta = p0 == 0 ? beta : 1.0f};
      for (int64_t i0 = 0; i0 < m; i0 += kBlockRows) {
        const int64_t rows = std::min(kBlockRows, m - i0);
        const float* a_block = a_block_buffer;
        if (a_packed) {
          a_block = a_packed + whole_offset(round_up(m, kTileRows), p0, kc, i0);
        } else {
          pack_a(trans_a, a, lda, i0, rows, p0, kc, a_block_buffer);
        }
        multiply_blocks(rows, cols, kc, a_block, b_block, c + i0 * ldc + j0, ldc, store);
      }
    }
  }
}

#define DTR_INSTANTIATE_PACKED_GEMM(S)                                                                  \
  template void packed_gemm<S>(Transpose, Transpose, int64_t, int64_t, int64_t, float, const S*, int64_t, \
                               const S*, int64_t, float, float*, int64_t, const float*);
DTR_INSTANTIATE_PACKED_GEMM(float)
DTR_INSTANTIATE_PACKED_GEMM(bf16)
DTR_INSTANTIATE_PACKED_GEMM(f16)
#undef DTR_INSTANTIATE_PACKED_GEMM

}  // namespace dtr::kernels::cpu::DTR_CPU_LEVEL
