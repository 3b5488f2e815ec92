#include "kernels/cpu/attention.h"

#include "kernels/cpu/parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace dtr::kernels::cpu {

namespace {

template <class A>
A dot(const A* a, const A* b, int64_t n) {
  A s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

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

}  // namespace

template <class A>
void attention_forward(const A* q, const A* k, const A* v, const AttentionDims& d, A* out, A* lse) {
  const int64_t group = d.q_heads / d.kv_heads;
  const int64_t D = d.head_dim;
  const A scale = static_cast<A>(d.scale);
  parallel_for(0, d.batch * d.kv_heads, grain_for(d), [&](int64_t begin, int64_t end) {
    std::vector<A> p(static_cast<size_t>(d.kv_len));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / d.kv_heads;
      const int64_t kvh = item % d.kv_heads;
      const A* kh = k + item * d.kv_len * D;
      const A* vh = v + item * d.kv_len * D;
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const int64_t qh_index = b * d.q_heads + h;
        for (int64_t t = 0; t < d.q_len; ++t) {
          const A* qt = q + (qh_index * d.q_len + t) * D;
          A* ot = out + (qh_index * d.q_len + t) * D;
          std::fill(ot, ot + D, A(0));
          const int64_t n = visible_keys(d, t);
          if (n == 0) {
            lse[qh_index * d.q_len + t] = -std::numeric_limits<A>::infinity();
            continue;
          }
          A m = -std::numeric_limits<A>::infinity();
          for (int64_t s = 0; s < n; ++s) {
            p[s] = scale * dot(qt, kh + s * D, D);
            m = std::max(m, p[s]);
          }
          A l = 0;
          for (int64_t s = 0; s < n; ++s) {
            p[s] = std::exp(p[s] - m);
            l += p[s];
          }
          const A inv = A(1) / l;
          for (int64_t s = 0; s < n; ++s) {
            const A w = p[s] * inv;
            const A* vs = vh + s * D;
            for (int64_t i = 0; i < D; ++i) ot[i] += w * vs[i];
          }
          lse[qh_index * d.q_len + t] = m + std::log(l);
        }
      }
    }
  });
}

template <class A>
void attention_backward(const A* q, const A* k, const A* v, const A* out, const A* lse,
                        const A* dout, const AttentionDims& d, A* dq, A* dk, A* dv) {
  const int64_t group = d.q_heads / d.kv_heads;
  const int64_t D = d.head_dim;
  const A scale = static_cast<A>(d.scale);
  parallel_for(0, d.batch * d.kv_heads, grain_for(d), [&](int64_t begin, int64_t end) {
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
        const int64_t qh_index = b * d.q_heads + h;
        for (int64_t t = 0; t < d.q_len; ++t) {
          const int64_t row = qh_index * d.q_len + t;
          const A* qt = q + row * D;
          const A* dot_t = dout + row * D;
          A* dqt = dq ? dq + row * D : nullptr;
          if (dqt) std::fill(dqt, dqt + D, A(0));
          const int64_t n = visible_keys(d, t);
          if (n == 0) continue;
          const A delta = dot(dot_t, out + row * D, D);
          const A row_lse = lse[row];
          for (int64_t s = 0; s < n; ++s) {
            const A* ks = kh + s * D;
            const A p = std::exp(scale * dot(qt, ks, D) - row_lse);
            const A ds = p * (dot(dot_t, vh + s * D, D) - delta);
            if (dvh) {
              for (int64_t i = 0; i < D; ++i) dvh[s * D + i] += p * dot_t[i];
            }
            if (dkh) {
              for (int64_t i = 0; i < D; ++i) dkh[s * D + i] += scale * ds * qt[i];
            }
            if (dqt) {
              for (int64_t i = 0; i < D; ++i) dqt[i] += scale * ds * ks[i];
            }
          }
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

}  // namespace dtr::kernels::cpu
