#include "dtr/kernels/cpu/attention.h"

#include "dtr/kernels/cpu/parallel.h"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace dtr::kernels::cpu::DTR_CPU_LEVEL {

namespace {

template <class A>
using Matrix = Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class A>
using MatrixMap = Eigen::Map<Matrix<A>>;
template <class A>
using ConstMatrixMap = Eigen::Map<const Matrix<A>>;

// Query rows per block: the block's scores (rows x visible keys) are one GEMM.
constexpr int64_t kQueryBlock = 64;

// Scratch for a block's scores, aligned to Eigen's widest packet: Eigen starts its
// vectorised row sums at the first aligned element, so a buffer whose alignment
// changed from run to run (malloc's 16 bytes under AVX) would change the order of
// the sums, and the results, from run to run.
template <class A>
using Scratch = Eigen::Matrix<A, Eigen::Dynamic, 1>;

// Keys query row t may see.
int64_t visible_keys(const AttentionDims& d, int64_t t) {
  if (!d.causal) return d.kv_len;
  return std::clamp<int64_t>(t + (d.kv_len - d.q_len) + 1, 0, d.kv_len);
}

// Work items: one per (batch, kv head), grain chosen from the work per item.
int64_t grain_for(const AttentionDims& d) {
  const int64_t per_item = std::max<int64_t>(1, (d.q_heads / std::max<int64_t>(d.kv_heads, 1)) *
                                                    d.q_len * d.kv_len * d.head_dim);
  return std::max<int64_t>(1, 32768 / per_item);
}

// Turns the scaled scores of query rows [t0, t0 + rows) (row r holds its first
// n_max keys) into probabilities exp(score - lse_r), 0 for the keys row r may not
// see. With `lse_out`, lse_r is computed (-inf for a row that sees no key) and
// written there; otherwise it is read from `lse_in`.
template <class A>
void softmax_rows(MatrixMap<A>& p, const AttentionDims& d, int64_t t0, const A* lse_in, A* lse_out) {
  const int64_t n_max = p.cols();
  for (int64_t r = 0; r < p.rows(); ++r) {
    const int64_t n = visible_keys(d, t0 + r);
    auto row = p.row(r);
    row.tail(n_max - n).setZero();
    if (n == 0) {
      if (lse_out) lse_out[r] = -std::numeric_limits<A>::infinity();
      continue;
    }
    auto seen = row.head(n).array();
    if (lse_out) {
      const A m = seen.maxCoeff();
      seen = (seen - m).exp();
      const A l = seen.sum();
      seen /= l;
      lse_out[r] = m + std::log(l);
    } else {
      seen = (seen - lse_in[r]).exp();
    }
  }
}

}  // namespace

// Per (batch, kv head), per query head of its group, per block of query rows:
// S = scale Q K^T over the keys the block's last row sees, softmax by rows,
// O = P V: two GEMMs and one vectorised pass over S.
template <class A>
void attention_forward(const A* q, const A* k, const A* v, const AttentionDims& d, A* out, A* lse) {
  const int64_t group = d.q_heads / d.kv_heads;
  const int64_t D = d.head_dim;
  const A scale = static_cast<A>(d.scale);
  parallel_for(0, d.batch * d.kv_heads, grain_for(d), [&](int64_t begin, int64_t end) {
    Scratch<A> scores(std::min(kQueryBlock, d.q_len) * d.kv_len);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / d.kv_heads;
      const int64_t kvh = item % d.kv_heads;
      const A* kh = k + item * d.kv_len * D;
      const A* vh = v + item * d.kv_len * D;
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const int64_t head_row = (b * d.q_heads + h) * d.q_len;
        for (int64_t t0 = 0; t0 < d.q_len; t0 += kQueryBlock) {
          const int64_t rows = std::min(kQueryBlock, d.q_len - t0);
          const int64_t n_max = visible_keys(d, t0 + rows - 1);
          MatrixMap<A> o(out + (head_row + t0) * D, rows, D);
          if (n_max == 0) {
            o.setZero();
            std::fill(lse + head_row + t0, lse + head_row + t0 + rows, -std::numeric_limits<A>::infinity());
            continue;
          }
          ConstMatrixMap<A> qb(q + (head_row + t0) * D, rows, D);
          ConstMatrixMap<A> kb(kh, n_max, D), vb(vh, n_max, D);
          MatrixMap<A> p(scores.data(), rows, n_max);
          p.noalias() = scale * qb * kb.transpose();
          softmax_rows(p, d, t0, static_cast<const A*>(nullptr), lse + head_row + t0);
          o.noalias() = p * vb;
        }
      }
    }
  });
}

// The same blocks: P is recomputed from Q, K and lse; then dV += P^T dO,
// dS = P o (dO V^T - delta), dK += scale dS^T Q, dQ = scale dS K. dK and dV of a
// (batch, kv head) are summed by one thread in a fixed order (heads, then blocks).
template <class A>
void attention_backward(const A* q, const A* k, const A* v, const A* out, const A* lse,
                        const A* dout, const AttentionDims& d, A* dq, A* dk, A* dv) {
  const int64_t group = d.q_heads / d.kv_heads;
  const int64_t D = d.head_dim;
  const A scale = static_cast<A>(d.scale);
  parallel_for(0, d.batch * d.kv_heads, grain_for(d), [&](int64_t begin, int64_t end) {
    const int64_t block_elems = std::min(kQueryBlock, d.q_len) * d.kv_len;
    Scratch<A> probs(block_elems), dprobs(block_elems);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / d.kv_heads;
      const int64_t kvh = item % d.kv_heads;
      const A* kh = k + item * d.kv_len * D;
      const A* vh = v + item * d.kv_len * D;
      A* dkh = dk ? dk + item * d.kv_len * D : nullptr;
      A* dvh = dv ? dv + item * d.kv_len * D : nullptr;
      if (dkh) std::fill(dkh, dkh + d.kv_len * D, A(0));
      if (dvh) std::fill(dvh, dvh + d.kv_len * D, A(0));
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const int64_t head_row = (b * d.q_heads + h) * d.q_len;
        for (int64_t t0 = 0; t0 < d.q_len; t0 += kQueryBlock) {
          const int64_t rows = std::min(kQueryBlock, d.q_len - t0);
          const int64_t n_max = visible_keys(d, t0 + rows - 1);
          const int64_t first = head_row + t0;
          if (n_max == 0) {
            if (dq) std::fill(dq + first * D, dq + (first + rows) * D, A(0));
            continue;
          }
          ConstMatrixMap<A> qb(q + first * D, rows, D), ob(out + first * D, rows, D);
          ConstMatrixMap<A> dob(dout + first * D, rows, D);
          ConstMatrixMap<A> kb(kh, n_max, D), vb(vh, n_max, D);
          MatrixMap<A> p(probs.data(), rows, n_max);
          p.noalias() = scale * qb * kb.transpose();
          softmax_rows(p, d, t0, lse + first, static_cast<A*>(nullptr));
          if (dvh) MatrixMap<A>(dvh, n_max, D).noalias() += p.transpose() * dob;
          if (!dkh && !dq) continue;
          const Eigen::Matrix<A, Eigen::Dynamic, 1> delta = (dob.array() * ob.array()).rowwise().sum();
          MatrixMap<A> ds(dprobs.data(), rows, n_max);
          ds.noalias() = dob * vb.transpose();
          ds.array() = p.array() * (ds.array().colwise() - delta.array());
          if (dkh) MatrixMap<A>(dkh, n_max, D).noalias() += scale * ds.transpose() * qb;
          if (dq) MatrixMap<A>(dq + first * D, rows, D).noalias() = scale * ds * kb;
        }
      }
    }
  });
}

template void attention_forward<float>(const float*, const float*, const float*,
                                       const AttentionDims&, float*, float*);
template void attention_forward<double>(const double*, const double*, const double*,
                                        const AttentionDims&, double*, double*);
template void attention_backward<float>(const float*, const float*, const float*, const float*,
                                        const float*, const float*, const AttentionDims&, float*,
                                        float*, float*);
template void attention_backward<double>(const double*, const double*, const double*,
                                         const double*, const double*, const double*,
                                         const AttentionDims&, double*, double*, double*);

}  // namespace dtr::kernels::cpu::DTR_CPU_LEVEL
