#include "dtr/tensor/dtype.h"

#include <array>

namespace dtr {

namespace {
constexpr std::array<std::string_view, kNumDTypes> kNames = {"f32", "f64", "bf16", "f16",
                                                              "i32", "i64", "u8"};
constexpr std::array<size_t, kNumDTypes> kSizes = {4, 8, 2, 2, 4, 8, 1};
}  // namespace

size_t element_size(DType dtype) { return kSizes[static_cast<size_t>(dtype)]; }

std::string_view dtype_name(DType dtype) { return kNames[static_cast<size_t>(dtype)]; }

DType parse_dtype(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<DType>(i);
  }
  DTR_FAIL("unknown dtype '{}': expected one of {}", name, fmt::join(kNames, ", "));
}

bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f64 || is_half(dtype);
}

bool is_half(DType dtype) { return dtype == DType::bf16 || dtype == DType::f16; }

}  // namespace dtr
