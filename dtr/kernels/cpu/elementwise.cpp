// where(), and the element tests integer ops run before they compute.
// The unary and binary kernels live in elementwise_unary.cpp and elementwise_binary.cpp.
#include "dtr/kernels/cpu/elementwise.h"

#include "dtr/kernels/cpu/strided_loop.h"

#include <array>
#include <atomic>
#include <type_traits>

namespace dtr::kernels::cpu::DTR_CPU_LEVEL {

template <class T>
void where(int ndim, const int64_t* sizes, const uint8_t* cond, const int64_t* cond_strides,
           const T* a, const int64_t* a_strides, const T* b, const int64_t* b_strides, T* out,
           const int64_t* out_strides) {
  for_each_row<4>(
      ndim, sizes, {out_strides, cond_strides, a_strides, b_strides},
      [&](const std::array<int64_t, 4>& off, int64_t n, const std::array<int64_t, 4>& inc) {
        T* o = out + off[0];
        const uint8_t* c = cond + off[1];
        const T* ai = a + off[2];
        const T* bi = b + off[3];
        if (inc[0] == 1 && inc[1] == 1 && inc[2] == 1 && inc[3] == 1) {
          for (int64_t i = 0; i < n; ++i) o[i] = c[i] != 0 ? ai[i] : bi[i];
          return;
        }
        for (int64_t i = 0; i < n; ++i) {
          o[i * inc[0]] = c[i * inc[1]] != 0 ? ai[i * inc[2]] : bi[i * inc[3]];
        }
      });
}

template <class T>
bool any_element(ElementTest test, int ndim, const int64_t* sizes, const T* x,
                 const int64_t* x_strides) {
  auto passes = [test](T v) {
    switch (test) {
      case ElementTest::zero: return v == T(0);
      case ElementTest::negative:
        if constexpr (std::is_unsigned_v<T>) {
          return false;
        } else {
          return v < T(0);
        }
    }
    return false;
  };
  std::atomic<bool> found{false};
  for_each_row<1>(ndim, sizes, {x_strides},
                  [&](const std::array<int64_t, 1>& off, int64_t n,
                      const std::array<int64_t, 1>& inc) {
                    if (found.load(std::memory_order_relaxed)) return;
                    const T* xi = x + off[0];
                    bool hit = false;
                    for (int64_t i = 0; i < n; ++i) hit |= passes(xi[i * inc[0]]);
                    if (hit) found.store(true, std::memory_order_relaxed);
                  });
  return found.load();
}

#define DTR_INSTANTIATE_WHERE(T)                                                            \
  template void where<T>(int, const int64_t*, const uint8_t*, const int64_t*, const T*,     \
                         const int64_t*, const T*, const int64_t*, T*, const int64_t*);     \
  template bool any_element<T>(ElementTest, int, const int64_t*, const T*, const int64_t*);
DTR_FOR_EACH_SCALAR(DTR_INSTANTIATE_WHERE)

}  // namespace dtr::kernels::cpu::DTR_CPU_LEVEL
