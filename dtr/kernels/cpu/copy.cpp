#include "dtr/kernels/cpu/copy.h"

#include "dtr/kernels/cpu/strided_loop.h"
#include "dtr/kernels/scalar_types.h"

#include <cstring>
#include <type_traits>

namespace dtr::kernels::cpu::DTR_CPU_LEVEL {

template <class From, class To>
void copy(int ndim, const int64_t* sizes, const From* src, const int64_t* src_strides, To* dst,
          const int64_t* dst_strides) {
  for_each_row<2>(ndim, sizes, {dst_strides, src_strides},
                  [&](const std::array<int64_t, 2>& off, int64_t n,
                      const std::array<int64_t, 2>& inc) {
                    To* d = dst + off[0];
                    const From* s = src + off[1];
                    if constexpr (std::is_same_v<From, To>) {
                      if (inc[0] == 1 && inc[1] == 1) {
                        std::memcpy(d, s, n * sizeof(To));
                        return;
                      }
                    }
                    for (int64_t i = 0; i < n; ++i) d[i * inc[0]] = convert<To>(s[i * inc[1]]);
                  });
}

template <class T>
void fill(int ndim, const int64_t* sizes, T* dst, const int64_t* dst_strides, T value) {
  for_each_row<1>(ndim, sizes, {dst_strides},
                  [&](const std::array<int64_t, 1>& off, int64_t n,
                      const std::array<int64_t, 1>& inc) {
                    T* d = dst + off[0];
                    for (int64_t i = 0; i < n; ++i) d[i * inc[0]] = value;
                  });
}

template <class T>
void arange(T* out, int64_t n, double start, double step) {
  for (int64_t i = 0; i < n; ++i) out[i] = convert<T>(start + static_cast<double>(i) * step);
}

#define DTR_INSTANTIATE_COPY_TO(To, From)                                                 \
  template void copy<From, To>(int, const int64_t*, const From*, const int64_t*, To*, \
                               const int64_t*);
#define DTR_INSTANTIATE_COPY_FROM(From)    \
  DTR_INSTANTIATE_COPY_TO(float, From)     \
  DTR_INSTANTIATE_COPY_TO(double, From)    \
  DTR_INSTANTIATE_COPY_TO(bf16, From)      \
  DTR_INSTANTIATE_COPY_TO(f16, From)       \
  DTR_INSTANTIATE_COPY_TO(int32_t, From)   \
  DTR_INSTANTIATE_COPY_TO(int64_t, From)   \
  DTR_INSTANTIATE_COPY_TO(uint8_t, From)
DTR_FOR_EACH_SCALAR(DTR_INSTANTIATE_COPY_FROM)

#define DTR_INSTANTIATE_FILL(T)                                        \
  template void fill<T>(int, const int64_t*, T*, const int64_t*, T); \
  template void arange<T>(T*, int64_t, double, double);
DTR_FOR_EACH_SCALAR(DTR_INSTANTIATE_FILL)

}  // namespace dtr::kernels::cpu::DTR_CPU_LEVEL
