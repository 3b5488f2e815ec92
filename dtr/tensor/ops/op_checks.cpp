#include "dtr/tensor/ops/op_checks.h"

#include <algorithm>

namespace dtr::ops {

Device check_device(std::string_view op, std::initializer_list<const Tensor*> operands,
                    Kernels kernels) {
  DTR_INTERNAL_ASSERT(operands.size() > 0);
  const Tensor& first = **operands.begin();
  DTR_CHECK(first.defined(), "{}: operand 0 is an undefined tensor", op);
  Device device = first.device();
  int index = 0;
  for (const Tensor* t : operands) {
    DTR_CHECK(t->defined(), "{}: operand {} is an undefined tensor", op, index);
    DTR_CHECK(t->device() == device, "{}: expected all operands on {}, but operand {} is on {}", op,
              device, index, t->device());
    ++index;
  }
#ifdef DTR_WITH_CUDA
  const bool cuda_ok = kernels == Kernels::cpu_and_cuda;
#else
  const bool cuda_ok = false;
#endif
  DTR_CHECK(device.is_cpu() || device.is_meta() || (device.is_cuda() && cuda_ok),
            "{}: no kernel for tensors on {} in this build (it runs on cpu{})", op, device,
            kernels == Kernels::cpu_and_cuda ? " and, in CUDA builds, cuda" : "");
  return device;
}

DType check_same_dtype(std::string_view op, std::initializer_list<const Tensor*> operands) {
  DType dtype = (*operands.begin())->dtype();
  int index = 0;
  for (const Tensor* t : operands) {
    DTR_CHECK(t->dtype() == dtype,
              "{}: expected all operands to have dtype {}, but operand {} has dtype {} (cast with "
              ".to(dtype) first)",
              op, dtype, index, t->dtype());
    ++index;
  }
  return dtype;
}

Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    // Align from the right.
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    DTR_CHECK(da == db || da == 1 || db == 1,
              "{}: shapes {} and {} cannot be broadcast: dim {} has sizes {} and {}", op,
              shape_str(a), shape_str(b), static_cast<int64_t>(i) - static_cast<int64_t>(n), da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace dtr::ops
