#include "dtr/tensor/cuda/cuda_copy.h"

#include "dtr/kernels/cuda/copy.h"
#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#include "dtr/tensor/cuda/pinned_allocator.h"
#include "dtr/tensor/factory.h"

namespace dtr::cuda {

namespace {

// Strided device-to-device copy with conversion, both tensors on one GPU.
void copy_on_device(const Tensor& dst, const Tensor& src) {
  DeviceGuard guard(dst.device().index);
  cudaStream_t stream = current_stream(dst.device().index);
  dispatch_dtype(src.dtype(), [&](auto src_tag) {
    using From = typename decltype(src_tag)::type;
    dispatch_dtype(dst.dtype(), [&](auto dst_tag) {
      using To = typename decltype(dst_tag)::type;
      kernels::cuda::copy<From, To>(static_cast<int>(dst.dim()), dst.sizes().data(),
                                    src.data<From>(), src.strides().data(), dst.data<To>(),
                                    dst.strides().data(), stream);
    });
  });
}

// Contiguous bytes between host and device (or device and device), waiting for completion.
void memcpy_sync(void* dst, const void* src, size_t nbytes, cudaMemcpyKind kind, int device) {
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  DTR_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, stream));
  DTR_CUDA_CHECK(cudaStreamSynchronize(stream));
}

// Host -> device from a contiguous pinned source, not waiting: straight into dst
// when it is contiguous of the source's dtype, else into a device buffer that is
// then converted / scattered on the device (same stream, so also not waiting).
void copy_from_pinned(const Tensor& dst, const Tensor& src) {
  const int device = dst.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  const bool direct = dst.is_contiguous() && dst.dtype() == src.dtype();
  Tensor landing = direct ? dst : empty(src.sizes(), {.dtype = src.dtype(), .device = dst.device()});
  DTR_CUDA_CHECK(
      cudaMemcpyAsync(landing.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyHostToDevice, stream));
  // Before `src` can be freed: its block is not reused until this stream passes the copy.
  PinnedHostAllocator::instance().record_stream(src.storage().data(), device, stream);
  if (!direct) copy_on_device(dst, landing);
}

}  // namespace

void copy_to_device_async(const Tensor& dst, const Tensor& src) {
  DTR_CHECK(dst.defined() && src.defined(), "copy_to_device_async: a tensor is undefined");
  DTR_CHECK(dst.device().is_cuda(), "copy_to_device_async: expected a destination on a GPU, found one on {}",
            dst.device());
  DTR_CHECK(src.device().is_cpu() && src.is_pinned(),
            "copy_to_device_async: expected a source in pinned host memory (Tensor::pin_memory), found {}",
            src.device().is_cpu() ? std::string("pageable host memory") : fmt::format("one on {}", src.device()));
  DTR_CHECK(src.is_contiguous(), "copy_to_device_async: expected a contiguous source, found sizes {} strides {}",
            shape_str(src.sizes()), shape_str(src.strides()));
  DTR_CHECK(dst.sizes() == src.sizes(), "copy_to_device_async: expected the same shape, found {} -> {}",
            shape_str(src.sizes()), shape_str(dst.sizes()));
  DTR_CHECK(!autograd::needs_grad({&src}),
            "copy_to_device_async: copying from a tensor that requires grad is not recorded by autograd; copy under "
            "NoGradGuard");
  autograd::check_inplace("copy_to_device_async", dst);
  if (dst.numel() == 0) return;
  autograd::NoGradGuard no_grad;
  copy_from_pinned(dst, src);
}

void copy_to_host_async(const Tensor& dst, const Tensor& src) {
  DTR_CHECK(dst.defined() && src.defined(), "copy_to_host_async: a tensor is undefined");
  DTR_CHECK(src.device().is_cuda(), "copy_to_host_async: expected a source on a GPU, found one on {}",
            src.device());
  DTR_CHECK(dst.device().is_cpu() && dst.is_pinned(),
            "copy_to_host_async: expected a destination in pinned host memory (Tensor::pin_memory), found {}",
            dst.device().is_cpu() ? std::string("pageable host memory") : fmt::format("one on {}", dst.device()));
  DTR_CHECK(dst.is_contiguous(), "copy_to_host_async: expected a contiguous destination, found sizes {} strides {}",
            shape_str(dst.sizes()), shape_str(dst.strides()));
  DTR_CHECK(dst.dtype() == src.dtype(), "copy_to_host_async: expected the same dtype, found {} -> {}", src.dtype(),
            dst.dtype());
  DTR_CHECK(dst.sizes() == src.sizes(), "copy_to_host_async: expected the same shape, found {} -> {}",
            shape_str(src.sizes()), shape_str(dst.sizes()));
  DTR_CHECK(!autograd::needs_grad({&src}),
            "copy_to_host_async: copying from a tensor that requires grad is not recorded by autograd; copy under "
            "NoGradGuard");
  autograd::check_inplace("copy_to_host_async", dst);
  if (dst.numel() == 0) return;
  const int device = src.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  autograd::NoGradGuard no_grad;
  Tensor packed = src.contiguous();  // on the device, queued on the same stream
  DTR_CUDA_CHECK(
      cudaMemcpyAsync(dst.raw_data(), packed.raw_data(), packed.nbytes(), cudaMemcpyDeviceToHost, stream));
  PinnedHostAllocator::instance().record_stream(dst.storage().data(), device, stream);
}

void copy_tensor(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  const Device from = src.device(), to = dst.device();
  if (from.is_cuda() && to.is_cuda()) {
    if (from == to) return copy_on_device(dst, src);
    // Across GPUs: contiguous on the source GPU, peer copy, then convert/scatter on the destination.
    Tensor packed = src.contiguous();
    Tensor landed = empty(src.sizes(), {.dtype = src.dtype(), .device = to});
    DTR_CUDA_CHECK(cudaMemcpyPeer(landed.raw_data(), to.index, packed.raw_data(), from.index,
                                  packed.nbytes()));
    return copy_on_device(dst, landed);
  }
  if (from.is_cpu()) {  // host -> device
    if (src.is_pinned() && src.is_contiguous()) {
      // DMA straight from the page-locked source, then wait like every copy_ (as
      // torch without non_blocking): the caller may overwrite the source at once.
      copy_from_pinned(dst, src);
      DTR_CUDA_CHECK(cudaStreamSynchronize(current_stream(to.index)));
      return;
    }
    Tensor host = src.to(dst.dtype()).contiguous();
    if (dst.is_contiguous()) {
      memcpy_sync(dst.raw_data(), host.raw_data(), host.nbytes(), cudaMemcpyHostToDevice, to.index);
    } else {
      Tensor staged = empty(dst.sizes(), {.dtype = dst.dtype(), .device = to});
      memcpy_sync(staged.raw_data(), host.raw_data(), host.nbytes(), cudaMemcpyHostToDevice, to.index);
      copy_on_device(dst, staged);
    }
    return;
  }
  DTR_INTERNAL_ASSERT(from.is_cuda() && to.is_cpu(), "copy {} -> {}", from, to);
  Tensor packed = src.contiguous().to(dst.dtype());  // still on the device
  if (dst.is_contiguous()) {
    memcpy_sync(dst.raw_data(), packed.raw_data(), packed.nbytes(), cudaMemcpyDeviceToHost, from.index);
  } else {
    Tensor host = empty(dst.sizes(), {.dtype = dst.dtype(), .device = Device::cpu()});
    memcpy_sync(host.raw_data(), packed.raw_data(), packed.nbytes(), cudaMemcpyDeviceToHost, from.index);
    Tensor(dst).copy_(host);
  }
}

void fill_tensor(const Tensor& dst, Scalar value) {
  DeviceGuard guard(dst.device().index);
  dispatch_dtype(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::cuda::fill<T>(static_cast<int>(dst.dim()), dst.sizes().data(), dst.data<T>(),
                           dst.strides().data(), value.to<T>(), current_stream(dst.device().index));
  });
}

void arange_tensor(const Tensor& out, double start, double step) {
  DeviceGuard guard(out.device().index);
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::cuda::arange<T>(out.data<T>(), out.numel(), start, step,
                             current_stream(out.device().index));
  });
}

}  // namespace dtr::cuda
