#include "dtr/mesh/mpi/host_staging.h"

#include "dtr/base/error.h"
#include "dtr/tensor/storage.h"

#include <cstring>
#include <type_traits>

#if DTR_WITH_CUDA
#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

namespace dtr::mesh::mpi {

namespace {

std::shared_ptr<void> host_buffer(size_t nbytes, bool pinned) {
#if DTR_WITH_CUDA
  if (pinned) {
    void* ptr = nullptr;
    DTR_CUDA_CHECK(cudaHostAlloc(&ptr, std::max<size_t>(nbytes, 1), cudaHostAllocDefault));
    return std::shared_ptr<void>(ptr, [](void* p) { cudaFreeHost(p); });
  }
#else
  DTR_INTERNAL_ASSERT(!pinned, "pinned host memory requested in a build without CUDA");
#endif
  auto storage = std::make_shared<Storage>(Storage::allocate(nbytes, Device::cpu(), MemoryTag::comm_buffer));
  return std::shared_ptr<void>(storage, storage->data());
}

#if DTR_WITH_CUDA
void copy_to_host(void* host, const Tensor& t) {
  cuda::DeviceGuard guard(t.device().index);
  cudaStream_t stream = cuda::current_stream(t.device().index);
  DTR_CUDA_CHECK(cudaMemcpyAsync(host, t.raw_data(), t.nbytes(), cudaMemcpyDeviceToHost, stream));
  DTR_CUDA_CHECK(cudaStreamSynchronize(stream));
}
#endif

}  // namespace

void* HostStaging::input(const Tensor& t) {
  if (!t.device().is_cuda()) return in_place(t);
#if DTR_WITH_CUDA
  auto buffer = host_buffer(t.nbytes(), /*pinned=*/true);
  copy_to_host(buffer.get(), t);
  buffers_.push_back(buffer);
  return buffer.get();
#else
  DTR_FAIL("MPI collective on {}: this build of dtr has no CUDA", t.device());
#endif
}

void* HostStaging::output(const Tensor& t, bool in_place) {
  if (!t.device().is_cuda()) return this->in_place(t);
#if DTR_WITH_CUDA
  auto buffer = host_buffer(t.nbytes(), /*pinned=*/true);
  if (in_place) copy_to_host(buffer.get(), t);
  buffers_.push_back(buffer);
  copy_backs_.push_back({t, buffer.get()});
  return buffer.get();
#else
  (void)in_place;
  DTR_FAIL("MPI collective on {}: this build of dtr has no CUDA", t.device());
#endif
}

void* HostStaging::in_place(const Tensor& t) {
  buffers_.push_back(std::make_shared<Tensor>(t));
  return t.raw_data();
}

void* HostStaging::scratch(size_t nbytes) {
  auto buffer = host_buffer(nbytes, /*pinned=*/false);
  buffers_.push_back(buffer);
  return buffer.get();
}

void HostStaging::copy_back() {
#if DTR_WITH_CUDA
  for (auto& pending : copy_backs_) {
    const Tensor& t = pending.device_tensor;
    cuda::DeviceGuard guard(t.device().index);
    cudaStream_t stream = cuda::current_stream(t.device().index);
    DTR_CUDA_CHECK(cudaMemcpyAsync(t.raw_data(), pending.host, t.nbytes(), cudaMemcpyHostToDevice, stream));
    DTR_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
#endif
  copy_backs_.clear();
}

void scale_in_place(void* data, int64_t count, DType dtype, double factor) {
  dispatch_floating(dtype, "premul_sum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    T* p = static_cast<T*>(data);
    const Acc f = static_cast<Acc>(factor);
    for (int64_t i = 0; i < count; ++i) p[i] = static_cast<T>(static_cast<Acc>(p[i]) * f);
  });
}

void divide_in_place(void* data, int64_t count, DType dtype, int64_t divisor) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    T* p = static_cast<T*>(data);
    const Acc d = static_cast<Acc>(divisor);
    for (int64_t i = 0; i < count; ++i) p[i] = static_cast<T>(static_cast<Acc>(p[i]) / d);
  });
}

void combine_in_place(void* inout, const void* in, int64_t count, DType dtype, ReduceOp::Kind kind) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const T* a = static_cast<const T*>(in);
    T* b = static_cast<T*>(inout);
    switch (kind) {
      case ReduceOp::Kind::sum:
      case ReduceOp::Kind::avg:
      case ReduceOp::Kind::premul_sum:
        for (int64_t i = 0; i < count; ++i) b[i] = static_cast<T>(static_cast<Acc>(a[i]) + static_cast<Acc>(b[i]));
        break;
      case ReduceOp::Kind::max:
      case ReduceOp::Kind::min: {
        const bool max = kind == ReduceOp::Kind::max;
        for (int64_t i = 0; i < count; ++i) {
          const Acc x = static_cast<Acc>(a[i]), y = static_cast<Acc>(b[i]);
          bool take_x = max ? x > y : x < y;
          if constexpr (std::is_floating_point_v<Acc>) take_x = take_x || x != x;
          if (take_x) b[i] = a[i];
        }
        break;
      }
    }
  });
}

}  // namespace dtr::mesh::mpi
