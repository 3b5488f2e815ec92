#include "dtr/kernels/cpu/random.h"

#include "dtr/kernels/cpu/copy.h"
#include "dtr/kernels/cpu/strided_loop.h"
#include "dtr/kernels/scalar_types.h"

#include <unsupported/Eigen/SpecialFunctions>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace dtr::kernels::cpu {

namespace {

// The type a fill computes in before rounding to T: double for double, float otherwise.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// The Philox block of the last element drawn, so consecutive elements that share a
// block compute it once. ~0 marks "none" (no fill reaches that block index).
class BlockCache {
 public:
  explicit BlockCache(PhiloxStream stream) : stream_(stream) {}
  const PhiloxBlock& get(uint64_t block) {
    if (block != block_) {
      words_ = philox_block(stream_, block);
      block_ = block;
    }
    return words_;
  }

 private:
  PhiloxStream stream_;
  uint64_t block_ = ~uint64_t{0};
  PhiloxBlock words_{};
};

// Samplers: element i's draw under the scheme in dtr/kernels/philox.h (the same words
// as uniform_float(i), ..., normal_double(i)), with blocks and Box-Muller pairs reused.
class UniformFloatSampler {
 public:
  explicit UniformFloatSampler(PhiloxStream s) : cache_(s) {}
  float operator()(uint64_t i) { return word_to_uniform_float(cache_.get(i / 4).w[i % 4]); }

 private:
  BlockCache cache_;
};

class UniformDoubleSampler {
 public:
  explicit UniformDoubleSampler(PhiloxStream s) : cache_(s) {}
  double operator()(uint64_t i) {
    const PhiloxBlock& b = cache_.get(i / 2);
    unsigned k = static_cast<unsigned>(i % 2);
    return words_to_uniform_double(b.w[2 * k], b.w[2 * k + 1]);
  }

 private:
  BlockCache cache_;
};

class NormalFloatSampler {
 public:
  explicit NormalFloatSampler(PhiloxStream s) : cache_(s) {}
  float operator()(uint64_t i) {
    uint64_t pair = i / 2;
    if (pair != pair_) {
      const PhiloxBlock& b = cache_.get(pair / 2);
      unsigned k = static_cast<unsigned>(pair % 2);
      z_ = box_muller_float(b.w[2 * k], b.w[2 * k + 1]);
      pair_ = pair;
    }
    return z_.z[i % 2];
  }

 private:
  BlockCache cache_;
  uint64_t pair_ = ~uint64_t{0};
  FloatPair z_{};
};

class NormalDoubleSampler {
 public:
  explicit NormalDoubleSampler(PhiloxStream s) : cache_(s) {}
  double operator()(uint64_t i) {
    uint64_t pair = i / 2;
    if (pair != pair_) {
      z_ = box_muller_double(cache_.get(pair));
      pair_ = pair;
    }
    return z_.z[i % 2];
  }

 private:
  BlockCache cache_;
  uint64_t pair_ = ~uint64_t{0};
  DoublePair z_{};
};

// dst[j] = transform(sampler(logical index of j)) over the box. Every row gets a fresh
// sampler, so rows may run on any thread in any order.
template <class Sampler, class T, class Transform>
void fill_box(T* dst, const LogicalBox& box, PhiloxStream stream, const Transform& transform) {
  std::vector<int64_t> logical_strides(box.ndim);
  int64_t stride = 1, base = 0;
  for (int d = box.ndim - 1; d >= 0; --d) {
    logical_strides[d] = stride;
    base += box.box_offset[d] * stride;
    stride *= std::max<int64_t>(box.logical_shape[d], 1);
  }
  for_each_row<2>(box.ndim, box.sizes, {box.dst_strides, logical_strides.data()},
                  [&](const std::array<int64_t, 2>& off, int64_t n,
                      const std::array<int64_t, 2>& inc) {
                    Sampler sample(stream);
                    T* d = dst + off[0];
                    auto i = static_cast<uint64_t>(base + off[1]);
                    auto step = static_cast<uint64_t>(inc[1]);
                    for (int64_t k = 0; k < n; ++k, i += step) d[k * inc[0]] = transform(sample(i));
                  });
}

// The largest T below x (x finite).
template <class T>
T next_below(T x) {
  if constexpr (is_half_v<T>) {
    auto bits = std::bit_cast<uint16_t>(x);
    if ((bits & 0x7FFF) == 0) return std::bit_cast<T>(uint16_t{0x8001});  // +-0
    return std::bit_cast<T>(static_cast<uint16_t>(bits & 0x8000 ? bits + 1 : bits - 1));
  } else {
    return std::nextafter(x, -std::numeric_limits<T>::infinity());
  }
}

double normal_cdf(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752440); }

}  // namespace

template <class T>
void uniform(T* dst, const LogicalBox& box, PhiloxStream stream, double lo, double hi) {
  using C = compute_t<T>;
  const C lo_c = static_cast<C>(lo), span = static_cast<C>(hi) - lo_c;
  const T lo_t = convert<T>(lo_c), hi_t = convert<T>(static_cast<C>(hi));
  const bool half_open = convert<C>(lo_t) < convert<C>(hi_t);
  const T top = half_open ? next_below(hi_t) : lo_t;
  auto transform = [&](C u) {
    T v = convert<T>(lo_c + span * u);
    return half_open && !(convert<C>(v) < convert<C>(hi_t)) ? top : v;
  };
  if constexpr (std::is_same_v<C, double>) {
    fill_box<UniformDoubleSampler>(dst, box, stream, transform);
  } else {
    fill_box<UniformFloatSampler>(dst, box, stream, transform);
  }
}

template <class T>
void normal(T* dst, const LogicalBox& box, PhiloxStream stream, double mean, double std) {
  using C = compute_t<T>;
  const C mean_c = static_cast<C>(mean), std_c = static_cast<C>(std);
  auto transform = [&](C z) { return convert<T>(mean_c + std_c * z); };
  if constexpr (std::is_same_v<C, double>) {
    fill_box<NormalDoubleSampler>(dst, box, stream, transform);
  } else {
    fill_box<NormalFloatSampler>(dst, box, stream, transform);
  }
}

template <class T>
void trunc_normal(T* dst, const LogicalBox& box, PhiloxStream stream, double mean, double std,
                  double a, double b) {
  double alpha = 0, beta = 0, p_lo = 0, p_hi = 0;
  bool flip = false;
  if (std > 0) {
    alpha = (a - mean) / std;
    beta = (b - mean) / std;
    flip = alpha > 0;
    if (flip) {
      double lower = -beta;
      beta = -alpha;
      alpha = lower;
    }
    p_lo = normal_cdf(alpha);
    p_hi = normal_cdf(beta);
  }
  if (!(p_hi > p_lo)) {  // std == 0, or no mass double can resolve: the bound nearest the mean
    fill<T>(box.ndim, box.sizes, dst, box.dst_strides, convert<T>(std::clamp(mean, a, b)));
    return;
  }
  // p stays inside (0, 1) so that z is finite even for infinite bounds.
  constexpr double kMinP = std::numeric_limits<double>::min(), kMaxP = 1.0 - 0x1p-53;
  auto transform = [&](double u) {
    double p = std::clamp(p_lo + u * (p_hi - p_lo), kMinP, kMaxP);
    double z = std::clamp(Eigen::numext::ndtri(p), alpha, beta);
    return convert<T>(std::clamp(mean + std * (flip ? -z : z), a, b));
  };
  fill_box<UniformDoubleSampler>(dst, box, stream, transform);
}

#define DTR_INSTANTIATE_RANDOM(T)                                                                \
  template void uniform<T>(T*, const LogicalBox&, PhiloxStream, double, double);               \
  template void normal<T>(T*, const LogicalBox&, PhiloxStream, double, double);                \
  template void trunc_normal<T>(T*, const LogicalBox&, PhiloxStream, double, double, double, \
                                double);
DTR_FOR_EACH_FLOATING(DTR_INSTANTIATE_RANDOM)

}  // namespace dtr::kernels::cpu
