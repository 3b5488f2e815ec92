// DType: the element types a Tensor can hold, their sizes and names, the mapping
// between DType and C++ types, and dispatch_dtype() which turns a runtime DType
// into a compile-time element type for calling typed kernels.
#pragma once

#include "dtr/base/error.h"
#include "dtr/kernels/scalar_types.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dtr {

enum class DType : uint8_t { f32, f64, bf16, f16, i32, i64, u8 };

inline constexpr int kNumDTypes = 7;

size_t element_size(DType dtype);
std::string_view dtype_name(DType dtype);  // "f32", "bf16", ...
DType parse_dtype(std::string_view name);  // inverse of dtype_name; throws on unknown names
bool is_floating(DType dtype);             // f32, f64, bf16, f16
bool is_half(DType dtype);                 // bf16, f16

template <class T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::f32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::f64; };
template <> struct DTypeOf<bf16> { static constexpr DType value = DType::bf16; };
template <> struct DTypeOf<f16> { static constexpr DType value = DType::f16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::i32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::i64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::u8; };
template <class T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

template <class T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<T>{}) with T the C++ type of `dtype`:
//   dispatch_dtype(t.dtype(), [&](auto tag) { using T = typename decltype(tag)::type; ... });
template <class Fn>
decltype(auto) dispatch_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return fn(TypeTag<float>{});
    case DType::f64: return fn(TypeTag<double>{});
    case DType::bf16: return fn(TypeTag<bf16>{});
    case DType::f16: return fn(TypeTag<f16>{});
    case DType::i32: return fn(TypeTag<int32_t>{});
    case DType::i64: return fn(TypeTag<int64_t>{});
    case DType::u8: return fn(TypeTag<uint8_t>{});
  }
  DTR_INTERNAL_ASSERT(false, "unknown dtype {}", static_cast<int>(dtype));
}

// Like dispatch_dtype, for ops defined on floating types only; other dtypes get
// an error naming the op.
template <class Fn>
decltype(auto) dispatch_floating(DType dtype, std::string_view op, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return fn(TypeTag<float>{});
    case DType::f64: return fn(TypeTag<double>{});
    case DType::bf16: return fn(TypeTag<bf16>{});
    case DType::f16: return fn(TypeTag<f16>{});
    default: break;
  }
  DTR_FAIL("{}: expected a floating dtype (f32, f64, bf16, f16), got {}", op, dtype_name(dtype));
}

}  // namespace dtr

template <>
struct fmt::formatter<dtr::DType> : fmt::formatter<std::string_view> {
  auto format(dtr::DType d, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(dtr::dtype_name(d), ctx);
  }
};
