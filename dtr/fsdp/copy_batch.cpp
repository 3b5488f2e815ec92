#include "dtr/fsdp/copy_batch.h"

#include "dtr/base/error.h"
#include "dtr/tensor/autograd/function.h"

#ifdef DTR_WITH_CUDA
#include "dtr/kernels/cuda/multi_copy.h"
#include "dtr/tensor/cuda/cuda_copy.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

#include <map>
#include <optional>
#include <tuple>
#include <type_traits>

namespace dtr::fsdp {

namespace {

void run_one(const CopyJob& job) {
#ifdef DTR_WITH_CUDA
  if (job.src.defined() && job.src.device().is_cpu() && job.src.is_pinned() && job.src.is_contiguous() &&
      job.dst.device().is_cuda() && job.src.sizes() == job.dst.sizes()) {
    cuda::copy_to_device_async(job.dst, job.src);
    return;
  }
#endif
  if (job.src.defined()) {
    job.dst.copy_(job.src);
  } else {
    job.dst.zero_();
  }
}

#ifdef DTR_WITH_CUDA
// A copy as a [rows, cols] block: column strides 1, row strides in elements.
struct Rows {
  int64_t rows = 1;
  int64_t cols = 0;
  int64_t dst_row_stride = 0;
  int64_t src_row_stride = 0;
};

// dst and src (same sizes; src may be null) as one Rows block, if they are one:
// size-1 dims dropped, neighbouring dims merged where both tensors allow it.
std::optional<Rows> as_rows(const Tensor& dst, const Tensor* src) {
  struct Dim {
    int64_t size, dst_stride, src_stride;
  };
  std::vector<Dim> dims;  // innermost first
  for (int64_t d = dst.dim() - 1; d >= 0; --d) {
    const int64_t size = dst.size(d);
    if (size == 1) continue;
    const int64_t ds = dst.stride(d), ss = src ? src->stride(d) : 0;
    if (!dims.empty()) {
      const Dim& in = dims.back();
      if (ds == in.size * in.dst_stride && (!src || ss == in.size * in.src_stride)) {
        dims.back().size *= size;
        continue;
      }
    }
    dims.push_back({size, ds, ss});
  }
  if (dims.empty()) return Rows{.rows = 1, .cols = 1};  // a single element
  if (dims.size() > 2 || dims[0].dst_stride != 1 || (src && dims[0].src_stride != 1)) return std::nullopt;
  if (dims.size() == 1) return Rows{.rows = 1, .cols = dims[0].size};
  if (dims[1].dst_stride < dims[0].size || dims[1].src_stride < 0) return std::nullopt;  // rows must not overlap
  return Rows{.rows = dims[1].size,
              .cols = dims[0].size,
              .dst_row_stride = dims[1].dst_stride,
              .src_row_stride = dims[1].src_stride};
}

bool kernel_converts(DType from, DType to) { return from == to || (is_floating(from) && is_floating(to)); }

// The job as a multi_copy item, when the kernel can run it.
std::optional<kernels::cuda::MultiCopyItem> as_item(const CopyJob& job) {
  const Tensor& dst = job.dst;
  if (!dst.device().is_cuda()) return std::nullopt;
  const Tensor* src = job.src.defined() ? &job.src : nullptr;
  if (src) {
    if (src->device() != dst.device() || src->sizes() != dst.sizes() || !kernel_converts(src->dtype(), dst.dtype()) ||
        src->storage().is_same(dst.storage())) {
      return std::nullopt;
    }
  }
  const std::optional<Rows> rows = as_rows(dst, src);
  if (!rows) return std::nullopt;
  return kernels::cuda::MultiCopyItem{.src = src ? src->raw_data() : nullptr,
                                      .dst = dst.raw_data(),
                                      .rows = rows->rows,
                                      .cols = rows->cols,
                                      .src_row_stride = rows->src_row_stride,
                                      .dst_row_stride = rows->dst_row_stride};
}

void launch(int device, DType from, DType to, const std::vector<kernels::cuda::MultiCopyItem>& items) {
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device);
  dispatch_dtype(from, [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    dispatch_dtype(to, [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      if constexpr (std::is_same_v<From, To> || (is_floating_v<From> && is_floating_v<To>)) {
        kernels::cuda::multi_copy<From, To>(items.data(), items.size(), stream);
      } else {
        DTR_INTERNAL_ASSERT(false, "multi_copy has no {} -> {} kernel", from, to);
      }
    });
  });
}
#endif

}  // namespace

void copy_batch(const std::vector<CopyJob>& jobs) {
#ifdef DTR_WITH_CUDA
  // (device, src dtype, dst dtype) -> copy items; (device, dst dtype) -> zero fills, which
  // join a copy launch into the same dst dtype (a zero fill ignores the src dtype).
  std::map<std::tuple<int, DType, DType>, std::vector<kernels::cuda::MultiCopyItem>> batches;
  std::map<std::pair<int, DType>, std::vector<kernels::cuda::MultiCopyItem>> zero_fills;
  for (const CopyJob& job : jobs) {
    DTR_CHECK(job.dst.defined(), "copy_batch: a destination tensor is undefined");
    std::optional<kernels::cuda::MultiCopyItem> item;
    if (job.dst.numel() > 0) item = as_item(job);
    if (!item) {
      run_one(job);
      continue;
    }
    // The checks and the version bump copy_ / zero_ would do.
    DTR_CHECK(!job.src.defined() || !autograd::needs_grad({&job.src}),
              "copy_batch: copying from a tensor that requires grad is not recorded by autograd; copy under "
              "NoGradGuard");
    autograd::check_inplace(job.src.defined() ? "copy_" : "fill_", job.dst);
    const int device = job.dst.device().index;
    if (job.src.defined()) {
      batches[{device, job.src.dtype(), job.dst.dtype()}].push_back(*item);
    } else {
      zero_fills[{device, job.dst.dtype()}].push_back(*item);
    }
  }
  for (auto& [key, zeros] : zero_fills) {
    const auto [device, to] = key;
    auto joined = batches.end();
    for (auto it = batches.begin(); it != batches.end(); ++it) {
      if (std::get<0>(it->first) == device && std::get<2>(it->first) == to) joined = it;
    }
    std::vector<kernels::cuda::MultiCopyItem>& items =
        joined != batches.end() ? joined->second : batches[{device, to, to}];
    items.insert(items.end(), zeros.begin(), zeros.end());
  }
  for (const auto& [key, items] : batches) launch(std::get<0>(key), std::get<1>(key), std::get<2>(key), items);
#else
  for (const CopyJob& job : jobs) run_one(job);
#endif
}

}  // namespace dtr::fsdp
