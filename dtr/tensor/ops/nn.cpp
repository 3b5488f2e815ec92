#include "dtr/tensor/ops/nn.h"

#include "dtr/kernels/cpu/cross_entropy.h"
#include "dtr/kernels/cpu/embedding.h"
#include "dtr/kernels/cpu/norm.h"
#include "dtr/kernels/cpu/reduce.h"
#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/nn_backward.h"
#include "dtr/tensor/ops/op_checks.h"

#ifdef DTR_WITH_CUDA
#include "dtr/kernels/cuda/cross_entropy.h"
#include "dtr/kernels/cuda/embedding.h"
#include "dtr/kernels/cuda/index_check.h"
#include "dtr/kernels/cuda/norm.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

#include <memory>
#include <string_view>
#include <vector>

namespace dtr {

namespace {

using ops::NormKind;

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// x is floating, at least 1-D, on cpu, cuda or meta; weight/bias (when defined) are
// [x.size(-1)] with x's dtype and device. Returns the device.
Device check_norm_inputs(std::string_view op, const Tensor& x, const Tensor& weight,
                         const Tensor& bias) {
  const Device device = ops::check_device(op, {&x}, ops::Kernels::cpu_and_cuda);
  DTR_CHECK(is_floating(x.dtype()),
            "{}: expected x of a floating dtype (f32, f64, bf16, f16), got {} (cast with "
            ".to(dtype) first)",
            op, x.dtype());
  DTR_CHECK(x.dim() >= 1, "{}: expected x with at least 1 dim to normalise over, got a 0-d tensor",
            op);
  const int64_t cols = x.size(-1);
  auto check_param = [&](const Tensor& p, std::string_view name) {
    if (!p.defined()) return;
    DTR_CHECK(p.dim() == 1 && p.size(0) == cols,
              "{}: {} must have shape [{}] (the size of the last dim of x, which is {}), got {}", op,
              name, cols, shape_str(x.sizes()), shape_str(p.sizes()));
    DTR_CHECK(p.dtype() == x.dtype(), "{}: {} has dtype {}, expected x's dtype {}", op, name,
              p.dtype(), x.dtype());
    DTR_CHECK(p.device() == x.device(), "{}: {} is on {}, expected x's device {}", op, name,
              p.device(), x.device());
  };
  check_param(weight, "weight");
  check_param(bias, "bias");
  return device;
}

// Shared by layer_norm and rms_norm (bias undefined for rms).
Tensor norm(NormKind kind, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const std::string_view op = kind == NormKind::layer ? "layer_norm" : "rms_norm";
  const Device device = check_norm_inputs(op, x, weight, bias);
  const int64_t cols = x.size(-1);
  Shape row_shape(x.sizes().begin(), x.sizes().end() - 1);
  const int64_t rows = numel_of(row_shape);
  const TensorOptions stat_options{.dtype = ops::acc_dtype(x.dtype()), .device = device};

  Tensor y = empty(x.sizes(), {.dtype = x.dtype(), .device = device});
  Tensor mean = kind == NormKind::layer ? empty({rows}, stat_options) : Tensor();
  Tensor rstd = empty({rows}, stat_options);
  const bool meta = device.is_meta();
  const Tensor xc = meta ? x : x.contiguous();
  const Tensor wc = meta || !weight.defined() ? weight : weight.contiguous();
  const Tensor bc = meta || !bias.defined() ? bias : bias.contiguous();
  if (!meta) {
    dispatch_floating(x.dtype(), op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using Acc = acc_t<T>;
#ifdef DTR_WITH_CUDA
      if (device.is_cuda()) {
        cuda::DeviceGuard guard(device.index);
        cudaStream_t stream = cuda::current_stream(device.index);
        if (kind == NormKind::layer) {
          kernels::cuda::layer_norm_forward<T>(xc.data<T>(), data_or_null<T>(wc),
                                               data_or_null<T>(bc), rows, cols, eps, y.data<T>(),
                                               mean.data<Acc>(), rstd.data<Acc>(), stream);
        } else {
          kernels::cuda::rms_norm_forward<T>(xc.data<T>(), data_or_null<T>(wc), rows, cols, eps,
                                             y.data<T>(), rstd.data<Acc>(), stream);
        }
        return;
      }
#endif
      if (kind == NormKind::layer) {
        kernels::cpu::layer_norm_forward<T>(xc.data<T>(), data_or_null<T>(wc), data_or_null<T>(bc),
                                            rows, cols, eps, y.data<T>(), mean.data<Acc>(),
                                            rstd.data<Acc>());
      } else {
        kernels::cpu::rms_norm_forward<T>(xc.data<T>(), data_or_null<T>(wc), rows, cols, eps,
                                          y.data<T>(), rstd.data<Acc>());
      }
    });
  }
  if (autograd::needs_grad({&x, &weight, &bias})) {
    auto node = std::make_shared<ops::NormBackward>(kind, xc, wc, mean, rstd);
    if (kind == NormKind::layer) {
      autograd::set_history(node, {&x, &weight, &bias}, {&y});
    } else {
      autograd::set_history(node, {&x, &weight}, {&y});
    }
  }
  return y;
}

// What a range check of an index tensor found: the first position whose index
// is out of range (-1 for none) with its value, and how many indices are not
// ignore_index.
struct IndexScan {
  int64_t first_bad = -1;
  int64_t bad_value = 0;
  int64_t counted = 0;
};

// Scans contiguous i64 `indices` for values outside [0, bound) other than
// ignore_index (when has_ignore), in index order like the CPU loops.
IndexScan scan_indices(const Tensor& indices, int64_t bound, bool has_ignore,
                       int64_t ignore_index) {
  const int64_t n = indices.numel();
  IndexScan scan;
#ifdef DTR_WITH_CUDA
  if (indices.device().is_cuda()) {
    // Checked on the device; only two numbers come back (one small copy that waits for
    // the stream, which the error must anyway), and the bad value only on error.
    const Device device = indices.device();
    cuda::DeviceGuard guard(device.index);
    const Tensor result = empty({2}, {.dtype = DType::i64, .device = device});
    kernels::cuda::check_indices(indices.data<int64_t>(), n, bound, has_ignore, ignore_index,
                                 result.data<int64_t>(), cuda::current_stream(device.index));
    const std::vector<int64_t> found = result.to_vector<int64_t>();
    scan.counted = found[1];
    if (found[0] > 0) {
      scan.first_bad = n - found[0];
      scan.bad_value = indices.reshape({n}).narrow(0, scan.first_bad, 1).item<int64_t>();
    }
    return scan;
  }
#endif
  const int64_t* idx = indices.data<int64_t>();
  for (int64_t t = 0; t < n; ++t) {
    if (has_ignore && idx[t] == ignore_index) continue;
    ++scan.counted;
    if (scan.first_bad < 0 && (idx[t] < 0 || idx[t] >= bound)) {
      scan.first_bad = t;
      scan.bad_value = idx[t];
    }
  }
  return scan;
}

}  // namespace

Tensor layer_norm(const Tensor& x, int64_t normalized_size, const Tensor& weight,
                  const Tensor& bias, double eps) {
  DTR_CHECK(!x.defined() || x.dim() == 0 || x.size(-1) == normalized_size,
            "layer_norm: normalized_size is {} but the last dim of x (shape {}) has size {}",
            normalized_size, shape_str(x.sizes()), x.size(-1));
  return norm(NormKind::layer, x, weight, bias, eps);
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  return norm(NormKind::rms, x, weight, Tensor(), eps);
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  constexpr std::string_view op = "embedding";
  const Device device = ops::check_device(op, {&weight, &indices}, ops::Kernels::cpu_and_cuda);
  DTR_CHECK(weight.dim() == 2,
            "embedding: weight must be 2-D [num_embeddings, embedding_dim], got shape {}",
            shape_str(weight.sizes()));
  DTR_CHECK(indices.dtype() == DType::i64,
            "embedding: indices must have dtype i64, got {} (cast with .to(DType::i64) first)",
            indices.dtype());
  const int64_t rows = weight.size(0);
  const int64_t cols = weight.size(1);
  Shape out_shape = indices.sizes();
  out_shape.push_back(cols);
  Tensor out = empty(out_shape, {.dtype = weight.dtype(), .device = device});
  const bool meta = device.is_meta();
  const Tensor ic = meta ? indices : indices.contiguous();
  if (!meta) {
    const IndexScan scan = scan_indices(ic, rows, /*has_ignore=*/false, 0);
    DTR_CHECK(scan.first_bad < 0,
              "embedding: index {} at position {} (of indices with shape {}) is out of range for "
              "a weight with {} rows (expected 0 <= index < {})",
              scan.bad_value, scan.first_bad, shape_str(indices.sizes()), rows, rows);
    const Tensor wc = weight.contiguous();
    dispatch_dtype(weight.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
#ifdef DTR_WITH_CUDA
      if (device.is_cuda()) {
        cuda::DeviceGuard guard(device.index);
        kernels::cuda::embedding_forward<T>(wc.data<T>(), cols, ic.data<int64_t>(), ic.numel(),
                                            out.data<T>(), cuda::current_stream(device.index));
        return;
      }
#endif
      kernels::cpu::embedding_forward<T>(wc.data<T>(), cols, ic.data<int64_t>(), ic.numel(),
                                         out.data<T>());
    });
  }
  if (autograd::needs_grad({&weight})) {
    auto node = std::make_shared<ops::EmbeddingBackward>(
        ic, autograd::OutputMeta{weight.sizes(), weight.dtype(), device});
    autograd::set_history(node, {&weight}, {&out});
  }
  return out;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                     double label_smoothing) {
  constexpr std::string_view op = "cross_entropy";
  const Device device =
      ops::check_device(op, {&logits, &targets}, ops::Kernels::cpu_and_cuda);
  DTR_CHECK(is_floating(logits.dtype()),
            "cross_entropy: logits must have a floating dtype (f32, f64, bf16, f16), got {} (cast "
            "with .to(dtype) first)",
            logits.dtype());
  DTR_CHECK(logits.dim() == 2, "cross_entropy: logits must be 2-D [N, C], got shape {}",
            shape_str(logits.sizes()));
  const int64_t rows = logits.size(0);
  const int64_t cols = logits.size(1);
  DTR_CHECK(targets.dtype() == DType::i64,
            "cross_entropy: targets must be class indices of dtype i64, got {} (cast with "
            ".to(DType::i64) first)",
            targets.dtype());
  DTR_CHECK(targets.dim() == 1 && targets.size(0) == rows,
            "cross_entropy: targets must have shape [{}] (one class index per row of logits {}), "
            "got {}",
            rows, shape_str(logits.sizes()), shape_str(targets.sizes()));
  DTR_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
            "cross_entropy: label_smoothing must be in [0, 1], got {}", label_smoothing);
  DTR_CHECK(cols > 0 || rows == 0, "cross_entropy: logits {} have 0 classes",
            shape_str(logits.sizes()));

  Tensor loss = empty({}, {.dtype = logits.dtype(), .device = device});
  Tensor stats = empty({2, rows}, {.dtype = ops::acc_dtype(logits.dtype()), .device = device});
  const bool meta = device.is_meta();
  const Tensor lc = meta ? logits : logits.contiguous();
  const Tensor tc = meta ? targets : targets.contiguous();
  int64_t counted = 0;
  if (!meta) {
    const IndexScan scan = scan_indices(tc, cols, /*has_ignore=*/true, ignore_index);
    DTR_CHECK(scan.first_bad < 0,
              "cross_entropy: target {} at row {} is out of range for {} classes (expected 0 <= "
              "target < {}, or ignore_index {})",
              scan.bad_value, scan.first_bad, cols, cols, ignore_index);
    counted = scan.counted;
    const int64_t* tgt = tc.data<int64_t>();
    dispatch_floating(logits.dtype(), op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using Acc = acc_t<T>;
      Acc* row_max = stats.data<Acc>();
#ifdef DTR_WITH_CUDA
      if (device.is_cuda()) {
        cuda::DeviceGuard guard(device.index);
        cudaStream_t stream = cuda::current_stream(device.index);
        const Tensor row_loss =
            empty({rows}, {.dtype = ops::acc_dtype(logits.dtype()), .device = device});
        kernels::cuda::cross_entropy_forward<T>(lc.data<T>(), tgt, rows, cols, ignore_index,
                                                label_smoothing, row_loss.data<Acc>(), row_max,
                                                row_max + rows, stream);
        kernels::cuda::cross_entropy_mean<T>(row_loss.data<Acc>(), rows, counted, loss.data<T>(),
                                             stream);
        return;
      }
#endif
      std::vector<Acc> row_loss(static_cast<size_t>(rows));
      kernels::cpu::cross_entropy_forward<T>(lc.data<T>(), tgt, rows, cols, ignore_index,
                                             label_smoothing, row_loss.data(), row_max,
                                             row_max + rows);
      Acc total = 0;  // pairwise, in a fixed order
      kernels::cpu::sum_rows<Acc>(row_loss.data(), 1, rows, &total);
      // Nothing counted: 0 / 0 = NaN, like PyTorch.
      *loss.data<T>() = convert<T>(total / static_cast<Acc>(counted));
    });
  }
  if (autograd::needs_grad({&logits})) {
    auto node = std::make_shared<ops::CrossEntropyBackward>(lc, tc, stats, ignore_index,
                                                            label_smoothing, counted);
    autograd::set_history(node, {&logits}, {&loss});
  }
  return loss;
}

}  // namespace dtr
