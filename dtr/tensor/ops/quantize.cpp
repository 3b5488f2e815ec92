#include "dtr/tensor/ops/quantize.h"

#include "dtr/base/error.h"
#include "dtr/kernels/block_quantize.h"
#include "dtr/kernels/cpu/block_quantize.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/op_checks.h"

#ifdef DTR_WITH_CUDA
#include "dtr/kernels/cuda/block_quantize.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

namespace dtr {

namespace {

void check_layout(const char* op, int64_t block, int bits) {
  DTR_CHECK(block > 0 && block % 2 == 0, "{}: expected an even, positive block size, got {}", op, block);
  DTR_CHECK(bits == 8 || bits == 4, "{}: expected 8 or 4 bits per code, got {}", op, bits);
}

// Calls fn with a float or bf16 tag for `dtype`; other dtypes are refused.
template <class Fn>
void dispatch_quantizable(const char* op, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: fn(TypeTag<float>{}); return;
    case DType::bf16: fn(TypeTag<bf16>{}); return;
    default: DTR_FAIL("{}: expected f32 or bf16 values, got {}", op, dtype);
  }
}

}  // namespace

int64_t block_quantized_code_bytes(int64_t numel, int bits) { return kernels::block_quantize_code_bytes(numel, bits); }

int64_t block_quantized_blocks(int64_t numel, int64_t block) { return (numel + block - 1) / block; }

void block_quantize_into(const Tensor& x, const BlockQuantized& q) {
  check_layout("block_quantize", q.block, q.bits);
  const Device device = ops::check_device("block_quantize", {&x, &q.codes, &q.absmax}, ops::Kernels::cpu_and_cuda);
  DTR_CHECK(x.is_contiguous(), "block_quantize: expected a contiguous tensor (call .contiguous() first)");
  DTR_CHECK(q.numel == x.numel(), "block_quantize: the output is for {} values, the input has {}", q.numel, x.numel());
  DTR_CHECK(q.codes.dtype() == DType::u8 && q.absmax.dtype() == DType::f32 && q.codes.is_contiguous() &&
                q.absmax.is_contiguous() && q.codes.numel() == block_quantized_code_bytes(q.numel, q.bits) &&
                q.absmax.numel() == block_quantized_blocks(q.numel, q.block),
            "block_quantize: {} int{} codes in blocks of {} need contiguous u8 codes of {} bytes and f32 absmax "
            "values of {}, got {} {} and {} {}",
            q.numel, q.bits, q.block, block_quantized_code_bytes(q.numel, q.bits),
            block_quantized_blocks(q.numel, q.block), q.codes.dtype(), q.codes.numel(), q.absmax.dtype(),
            q.absmax.numel());
  if (device.is_meta()) return;
  dispatch_quantizable("block_quantize", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
#ifdef DTR_WITH_CUDA
    if (device.is_cuda()) {
      cuda::DeviceGuard guard(device.index);
      kernels::cuda::block_quantize<T>(x.data<T>(), q.numel, q.block, q.bits, q.codes.data<uint8_t>(),
                                       q.absmax.data<float>(), cuda::current_stream(device.index));
      return;
    }
#endif
    kernels::cpu::block_quantize<T>(x.data<T>(), q.numel, q.block, q.bits, q.codes.data<uint8_t>(),
                                    q.absmax.data<float>());
  });
}

BlockQuantized block_quantize(const Tensor& x, int64_t block, int bits) {
  check_layout("block_quantize", block, bits);
  const Device device = ops::check_device("block_quantize", {&x}, ops::Kernels::cpu_and_cuda);
  BlockQuantized q{.numel = x.numel(), .block = block, .bits = bits};
  q.codes = empty({block_quantized_code_bytes(q.numel, bits)}, {.dtype = DType::u8, .device = device});
  q.absmax = empty({block_quantized_blocks(q.numel, block)}, {.dtype = DType::f32, .device = device});
  block_quantize_into(x, q);
  return q;
}

void block_dequantize_into(const BlockQuantized& q, const Tensor& out) {
  check_layout("block_dequantize", q.block, q.bits);
  const Device device = ops::check_device("block_dequantize", {&q.codes, &q.absmax, &out}, ops::Kernels::cpu_and_cuda);
  DTR_CHECK(q.codes.dtype() == DType::u8 && q.absmax.dtype() == DType::f32 && q.codes.is_contiguous() &&
                q.absmax.is_contiguous(),
            "block_dequantize: expected contiguous u8 codes and f32 absmax values, got {} and {}", q.codes.dtype(),
            q.absmax.dtype());
  DTR_CHECK(q.codes.numel() == block_quantized_code_bytes(q.numel, q.bits) &&
                q.absmax.numel() == block_quantized_blocks(q.numel, q.block),
            "block_dequantize: {} int{} codes in blocks of {} need {} code bytes and {} absmax values, got {} and {}",
            q.numel, q.bits, q.block, block_quantized_code_bytes(q.numel, q.bits),
            block_quantized_blocks(q.numel, q.block), q.codes.numel(), q.absmax.numel());
  DTR_CHECK(out.is_contiguous() && out.numel() == q.numel,
            "block_dequantize: expected a contiguous output of {} elements, got {} ({})", q.numel, out.numel(),
            out.is_contiguous() ? "contiguous" : "not contiguous");
  if (device.is_meta()) return;
  dispatch_quantizable("block_dequantize", out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
#ifdef DTR_WITH_CUDA
    if (device.is_cuda()) {
      cuda::DeviceGuard guard(device.index);
      kernels::cuda::block_dequantize<T>(q.codes.data<uint8_t>(), q.absmax.data<float>(), q.numel, q.block, q.bits,
                                         out.data<T>(), cuda::current_stream(device.index));
      return;
    }
#endif
    kernels::cpu::block_dequantize<T>(q.codes.data<uint8_t>(), q.absmax.data<float>(), q.numel, q.block, q.bits,
                                      out.data<T>());
  });
}

Tensor block_dequantize(const BlockQuantized& q, const Shape& shape, DType dtype) {
  DTR_CHECK(numel_of(shape) == q.numel, "block_dequantize: shape {} has {} elements, the codes hold {}",
            shape_str(shape), numel_of(shape), q.numel);
  Tensor out = empty(shape, {.dtype = dtype, .device = q.codes.device()});
  block_dequantize_into(q, out);
  return out;
}

}  // namespace dtr
