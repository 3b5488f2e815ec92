#include "dtr/tensor/random.h"

#include "dtr/kernels/cpu/random.h"
#include "dtr/kernels/philox.h"
#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/op_checks.h"

#ifdef DTR_WITH_CUDA
#include "dtr/kernels/cuda/random.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

#include <cmath>
#include <limits>
#include <optional>
#include <string_view>

namespace dtr {

// ---------------------------------------------------------------- Generator

Generator& Generator::operator=(const Generator& other) {
  if (this != &other) set_state(other.state());
  return *this;
}

void Generator::manual_seed(uint64_t seed) { set_state({seed, 0}); }

GeneratorState Generator::state() const {
  std::lock_guard lock(mutex_);
  return state_;
}

void Generator::set_state(const GeneratorState& state) {
  std::lock_guard lock(mutex_);
  state_ = state;
}

GeneratorState Generator::next_fill(int64_t logical_numel) {
  DTR_INTERNAL_ASSERT(logical_numel >= 0, "negative numel {}", logical_numel);
  std::lock_guard lock(mutex_);
  GeneratorState drawn = state_;
  state_.offset += kernels::philox_offset_advance(static_cast<uint64_t>(logical_numel));
  return drawn;
}

Generator& default_generator() {
  static Generator generator;
  return generator;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

// ---------------------------------------------------------------- fills

namespace {

// The logical tensor a fill's destination is a box of, checked.
struct LogicalTarget {
  Shape shape;
  Shape offset;
};

LogicalTarget check_target(std::string_view op, const Tensor& t, const LogicalSlice& slice) {
  ops::check_device(op, {&t}, ops::Kernels::cpu_and_cuda);
  DTR_CHECK(is_floating(t.dtype()), "{}: expected a floating dtype (f32, f64, bf16, f16), got {}",
            op, t.dtype());
  for (int64_t d = 0; d < t.dim(); ++d) {
    DTR_CHECK(t.size(d) <= 1 || t.stride(d) != 0,
              "{}: the destination has overlapping elements (dim {} has size {} and stride 0, "
              "shape {}, strides {}); fill a tensor that owns each element, then expand it",
              op, d, t.size(d), shape_str(t.sizes()), shape_str(t.strides()));
  }
  if (slice.is_whole()) return {t.sizes(), Shape(t.sizes().size(), 0)};
  const auto rank = static_cast<size_t>(t.dim());
  DTR_CHECK(slice.logical_shape.size() == rank && slice.offset.size() == rank,
            "{}: the slice's logical shape {} and offset {} must have one entry per dim of the "
            "{}-d tensor of shape {}",
            op, shape_str(slice.logical_shape), shape_str(slice.offset), rank,
            shape_str(t.sizes()));
  for (size_t d = 0; d < rank; ++d) {
    int64_t start = slice.offset[d], size = t.sizes()[d], extent = slice.logical_shape[d];
    DTR_CHECK(extent >= 0 && start >= 0 && start + size <= extent,
              "{}: a box of shape {} at offset {} does not fit in the logical shape {} (dim {}: "
              "[{}, {}) is outside [0, {}))",
              op, shape_str(t.sizes()), shape_str(slice.offset), shape_str(slice.logical_shape), d,
              start, start + size, extent);
  }
  return {slice.logical_shape, slice.offset};
}

// Where a fill runs: on the host (cuda_stream unused) or on t's CUDA device, on its
// current stream.
struct FillTarget {
  bool cuda = false;
#ifdef DTR_WITH_CUDA
  cudaStream_t cuda_stream = nullptr;
#endif
};

// Claims the fill's counters (always, so ranks stay in step) and runs `kernel` with
// the typed destination unless the tensor holds nothing to write (on a cuda tensor,
// under its device).
template <class Kernel>
const Tensor& run_fill(std::string_view op, const Tensor& t, const LogicalTarget& target, Generator* gen,
                 Kernel&& kernel) {
  autograd::check_inplace(op, t);
  Generator& g = gen != nullptr ? *gen : default_generator();
  GeneratorState s = g.next_fill(numel_of(target.shape));
  if (t.device().is_meta() || t.numel() == 0) return t;
  kernels::cpu::LogicalBox box{.ndim = static_cast<int>(t.dim()),
                               .sizes = t.sizes().data(),
                               .dst_strides = t.strides().data(),
                               .logical_shape = target.shape.data(),
                               .box_offset = target.offset.data()};
  kernels::PhiloxStream stream{.seed = s.seed, .offset = s.offset};
  FillTarget where;
#ifdef DTR_WITH_CUDA
  std::optional<cuda::DeviceGuard> guard;
  if (t.device().is_cuda()) {
    guard.emplace(t.device().index);
    where = {.cuda = true, .cuda_stream = cuda::current_stream(t.device().index)};
  }
#endif
  dispatch_floating(t.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernel(t.data<T>(), box, stream, where);
  });
  return t;
}

// The largest finite value of dtype (a floating dtype).
double finite_max(DType dtype) {
  return dispatch_floating(dtype, "finite_max", [](auto tag) {
    using T = typename decltype(tag)::type;
    return convert<double>(std::numeric_limits<T>::max());
  });
}

}  // namespace

const Tensor& uniform_(const Tensor& t, double lo, double hi, Generator* gen, const LogicalSlice& slice) {
  LogicalTarget target = check_target("uniform_", t, slice);
  DTR_CHECK(std::isfinite(lo) && std::isfinite(hi),
            "uniform_: expected finite lo and hi, got lo = {}, hi = {}", lo, hi);
  DTR_CHECK(lo <= hi, "uniform_: expected lo <= hi, got lo = {} > hi = {}", lo, hi);
  double max = finite_max(t.dtype());
  DTR_CHECK(std::abs(lo) <= max && std::abs(hi) <= max,
            "uniform_: [lo, hi) = [{}, {}) is outside the finite range of {} (+-{})", lo, hi,
            t.dtype(), max);
  // The kernels compute lo + (hi - lo) * u in float (double for f64).
  double span = t.dtype() == DType::f64
                    ? hi - lo
                    : static_cast<double>(static_cast<float>(hi) - static_cast<float>(lo));
  DTR_CHECK(std::isfinite(span), "uniform_: hi - lo overflows for lo = {}, hi = {} in {}", lo, hi,
            t.dtype());
  return run_fill("uniform_", t, target, gen,
                  [&](auto* dst, const auto& box, auto stream,
                      [[maybe_unused]] const FillTarget& where) {
#ifdef DTR_WITH_CUDA
                    if (where.cuda) {
                      kernels::cuda::uniform(dst, box, stream, lo, hi, where.cuda_stream);
                      return;
                    }
#endif
                    kernels::cpu::uniform(dst, box, stream, lo, hi);
                  });
}

const Tensor& normal_(const Tensor& t, double mean, double std, Generator* gen, const LogicalSlice& slice) {
  LogicalTarget target = check_target("normal_", t, slice);
  DTR_CHECK(std::isfinite(mean) && std::isfinite(std),
            "normal_: expected finite mean and std, got mean = {}, std = {}", mean, std);
  DTR_CHECK(std >= 0, "normal_: expected std >= 0, got std = {}", std);
  return run_fill("normal_", t, target, gen,
                  [&](auto* dst, const auto& box, auto stream,
                      [[maybe_unused]] const FillTarget& where) {
#ifdef DTR_WITH_CUDA
                    if (where.cuda) {
                      kernels::cuda::normal(dst, box, stream, mean, std, where.cuda_stream);
                      return;
                    }
#endif
                    kernels::cpu::normal(dst, box, stream, mean, std);
                  });
}

const Tensor& trunc_normal_(const Tensor& t, double mean, double std, double a, double b, Generator* gen,
                      const LogicalSlice& slice) {
  LogicalTarget target = check_target("trunc_normal_", t, slice);
  DTR_CHECK(std::isfinite(mean) && std::isfinite(std),
            "trunc_normal_: expected finite mean and std, got mean = {}, std = {}", mean, std);
  DTR_CHECK(std >= 0, "trunc_normal_: expected std >= 0, got std = {}", std);
  DTR_CHECK(a < b, "trunc_normal_: expected a < b, got a = {}, b = {}", a, b);
  return run_fill("trunc_normal_", t, target, gen,
                  [&](auto* dst, const auto& box, auto stream,
                      [[maybe_unused]] const FillTarget& where) {
#ifdef DTR_WITH_CUDA
                    if (where.cuda) {
                      kernels::cuda::trunc_normal(dst, box, stream, mean, std, a, b,
                                                  where.cuda_stream);
                      return;
                    }
#endif
                    kernels::cpu::trunc_normal(dst, box, stream, mean, std, a, b);
                  });
}

Tensor rand(const Shape& shape, const TensorOptions& options, Generator* gen) {
  Tensor t = empty(shape, options);
  uniform_(t, 0, 1, gen);
  return t;
}

Tensor randn(const Shape& shape, const TensorOptions& options, Generator* gen) {
  Tensor t = empty(shape, options);
  normal_(t, 0, 1, gen);
  return t;
}

}  // namespace dtr
