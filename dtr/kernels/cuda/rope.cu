#include "dtr/kernels/cuda/rope.h"

#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/cuda/ieee_ops.cuh"

#include <algorithm>
#include <cmath>
#include <string>

namespace dtr::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // grid-stride loops beyond this

// The frequencies theta^(-2i / dim) of one launch of the table kernel, computed on
// the host with the CPU op's std::pow and passed by value.
constexpr int kFreqsPerLaunch = 128;
struct Freqs {
  double v[kFreqsPerLaunch];
};

// cos_table[t, i] and sin_table[t, i] of the angle sign * (offset + t) * freq(i),
// for i in [first, first + count) (freqs.v[i - first]).
template <class A>
__global__ void __launch_bounds__(kThreads)
    rope_table_kernel(int64_t seq, int64_t half, int64_t first, int count, Freqs freqs,
                      int64_t offset, double sign, A* __restrict__ cos_table,
                      A* __restrict__ sin_table) {
  const int64_t n = seq * count;
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = k / count;
    const int j = static_cast<int>(k - t * count);
    // The CPU op's expression, evaluated left to right in double: the same angle bits.
    const double angle = sign * static_cast<double>(offset + t) * freqs.v[j];
    cos_table[t * half + first + j] = static_cast<A>(cos(angle));
    sin_table[t * half + first + j] = static_cast<A>(sin(angle));
  }
}

// One thread per pair p: row r = p / half (row r is (b, t, h) with t = (r / heads) % seq),
// pair i = p % half at elements 2p and 2p + 1.
template <class T>
__global__ void __launch_bounds__(kThreads)
    rope_rotate_kernel(const T* in, T* out, int64_t pairs, int64_t half, int64_t heads,
                       int64_t seq, const acc_t<T>* __restrict__ cos_table,
                       const acc_t<T>* __restrict__ sin_table) {
  using A = acc_t<T>;
  for (int64_t p = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; p < pairs;
       p += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = p / half;
    const int64_t i = p - r * half;
    const int64_t t = (r / heads) % seq;
    const A c = cos_table[t * half + i];
    const A s = sin_table[t * half + i];
    const A x0 = convert<A>(in[2 * p]);
    const A x1 = convert<A>(in[2 * p + 1]);
    out[2 * p] = convert<T>(sub_rn(mul_rn(x0, c), mul_rn(x1, s)));
    out[2 * p + 1] = convert<T>(add_rn(mul_rn(x0, s), mul_rn(x1, c)));
  }
}

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

}  // namespace

int64_t rope_table_elements(int64_t seq, int64_t dim) { return 2 * seq * (dim / 2); }

template <class T>
void rope_rotate(const T* in, T* out, int64_t batch, int64_t seq, int64_t heads, int64_t dim,
                 double theta, int64_t offset, double sign, acc_t<T>* table, cudaStream_t stream) {
  using A = acc_t<T>;
  DTR_CUDA_KERNEL_CHECK(batch >= 0 && seq >= 0 && heads >= 0 && dim >= 0 && dim % 2 == 0,
                        "CUDA rope: expected sizes >= 0 and an even dim, got [" +
                            std::to_string(batch) + ", " + std::to_string(seq) + ", " +
                            std::to_string(heads) + ", " + std::to_string(dim) + "]");
  DTR_CUDA_KERNEL_CHECK(offset >= 0, "CUDA rope: expected offset >= 0, got " + std::to_string(offset));
  const int64_t half = dim / 2;
  const int64_t pairs = batch * seq * heads * half;
  if (pairs == 0) return;
  DTR_CUDA_KERNEL_CHECK(in != nullptr && out != nullptr && table != nullptr,
                        "CUDA rope: in, out and table must not be null");
  A* cos_table = table;
  A* sin_table = table + seq * half;
  for (int64_t first = 0; first < half; first += kFreqsPerLaunch) {
    const int count = static_cast<int>(std::min<int64_t>(kFreqsPerLaunch, half - first));
    Freqs freqs{};
    for (int j = 0; j < count; ++j) {
      freqs.v[j] = std::pow(theta, -2.0 * static_cast<double>(first + j) / static_cast<double>(dim));
    }
    rope_table_kernel<A><<<blocks_for(seq * count), kThreads, 0, stream>>>(
        seq, half, first, count, freqs, offset, sign, cos_table, sin_table);
    DTR_CUDA_CHECK_LAUNCH();
  }
  rope_rotate_kernel<T><<<blocks_for(pairs), kThreads, 0, stream>>>(in, out, pairs, half, heads, seq,
                                                                   cos_table, sin_table);
  DTR_CUDA_CHECK_LAUNCH();
}

#define DTR_INSTANTIATE_CUDA_ROPE(T)                                                           \
  template void rope_rotate<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, double, int64_t, \
                               double, acc_t<T>*, cudaStream_t);
DTR_FOR_EACH_FLOATING(DTR_INSTANTIATE_CUDA_ROPE)

}  // namespace dtr::kernels::cuda
