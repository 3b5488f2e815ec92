// The backwards of layer_norm, rms_norm, embedding and cross_entropy
// (declared in dtr/tensor/ops/nn_backward.h), on the fused kernels of
// dtr/kernels/cpu/norm.h, embedding.h and cross_entropy.h (on cuda tensors: their
// twins in kernels/cuda/).
#include "dtr/tensor/ops/nn_backward.h"

#include "dtr/kernels/cpu/cross_entropy.h"
#include "dtr/kernels/cpu/embedding.h"
#include "dtr/kernels/cpu/norm.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/gemm_aligned_rows.h"

#ifdef DTR_WITH_CUDA
#include "dtr/kernels/cuda/cross_entropy.h"
#include "dtr/kernels/cuda/embedding.h"
#include "dtr/kernels/cuda/norm.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

#include <utility>

namespace dtr::ops {

DType acc_dtype(DType dtype) { return dtype == DType::f64 ? DType::f64 : DType::f32; }

namespace {

// The incoming gradient in the dtype the kernels read, contiguous.
Tensor kernel_grad(const Tensor& grad, DType dtype) { return grad.to(dtype).contiguous(); }

template <class T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

NormBackward::NormBackward(NormKind kind, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd)
    : kind_(kind), x_(x), weight_(weight), mean_(mean), rstd_(rstd) {}

std::string NormBackward::name() const {
  return kind_ == NormKind::layer ? "LayerNormBackward" : "RmsNormBackward";
}

void NormBackward::release_saved() {
  x_.release();
  weight_.release();
  mean_.release();
  rstd_.release();
}

std::vector<Tensor> NormBackward::apply(std::vector<Tensor> grads) {
  const Tensor x = x_.unpack(*this);
  const Tensor weight = weight_.unpack(*this);
  const Tensor mean = mean_.unpack(*this);
  const Tensor rstd = rstd_.unpack(*this);
  const bool layer = kind_ == NormKind::layer;
  std::vector<Tensor> out(layer ? 3 : 2);
  if (!grads[0].defined()) return out;

  const int64_t cols = x.size(-1);
  const int64_t rows = rstd.numel();
  const TensorOptions options{.dtype = x.dtype(), .device = x.device()};
  if (needs_input_grad(0)) out[0] = empty(x.sizes(), options);
  if (needs_input_grad(1)) out[1] = empty({cols}, options);
  if (layer && needs_input_grad(2)) out[2] = empty({cols}, options);
  if (x.device().is_meta()) return out;

  const Tensor dy = kernel_grad(grads[0], x.dtype());
  dispatch_floating(x.dtype(), name(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    T* dx = data_or_null<T>(out[0]);
    T* dweight = data_or_null<T>(out[1]);
#ifdef DTR_WITH_CUDA
    if (x.device().is_cuda()) {
      const int index = x.device().index;
      cuda::DeviceGuard guard(index);
      cudaStream_t stream = cuda::current_stream(index);
      T* dbias = layer ? data_or_null<T>(out[2]) : nullptr;
      // The per-chunk partial sums of dweight / dbias (no atomics).
      const int64_t scratch_elements = kernels::cuda::norm_backward_scratch_elements(
          rows, cols, dweight != nullptr, dbias != nullptr);
      Tensor scratch;
      if (scratch_elements > 0) {
        scratch = empty({scratch_elements}, {.dtype = acc_dtype(x.dtype()), .device = x.device()});
      }
      Acc* scratch_data = scratch.defined() ? scratch.data<Acc>() : nullptr;
      if (layer) {
        kernels::cuda::layer_norm_backward<T>(dy.data<T>(), x.data<T>(), mean.data<Acc>(),
                                              rstd.data<Acc>(), data_or_null<T>(weight), rows,
                                              cols, dx, dweight, dbias, scratch_data, stream);
      } else {
        kernels::cuda::rms_norm_backward<T>(dy.data<T>(), x.data<T>(), rstd.data<Acc>(),
                                            data_or_null<T>(weight), rows, cols, dx, dweight,
                                            scratch_data, stream);
      }
      return;
    }
#endif
    if (layer) {
      kernels::cpu::layer_norm_backward<T>(dy.data<T>(), x.data<T>(), mean.data<Acc>(),
                                           rstd.data<Acc>(), data_or_null<T>(weight), rows, cols,
                                           dx, dweight, data_or_null<T>(out[2]));
    } else {
      kernels::cpu::rms_norm_backward<T>(dy.data<T>(), x.data<T>(), rstd.data<Acc>(),
                                         data_or_null<T>(weight), rows, cols, dx, dweight);
    }
  });
  return out;
}

EmbeddingBackward::EmbeddingBackward(const Tensor& indices, autograd::OutputMeta weight_meta)
    : indices_(indices), weight_meta_(std::move(weight_meta)) {}

std::vector<Tensor> EmbeddingBackward::apply(std::vector<Tensor> grads) {
  const Tensor indices = indices_.unpack(*this);
  if (!grads[0].defined() || !needs_input_grad(0)) return {Tensor()};
  const DType dtype = weight_meta_.dtype;
  Tensor grad_weight = empty(weight_meta_.shape, {.dtype = dtype, .device = weight_meta_.device});
  if (weight_meta_.device.is_meta()) return {grad_weight};

  const Tensor grad_out = kernel_grad(grads[0], dtype);
  dispatch_floating(dtype, name(), [&](auto tag) {
    using T = typename decltype(tag)::type;
#ifdef DTR_WITH_CUDA
    if (const Device device = weight_meta_.device; device.is_cuda()) {
      cuda::DeviceGuard guard(device.index);
      const int64_t tokens = indices.numel();
      const auto bytes =
          static_cast<int64_t>(kernels::cuda::embedding_backward_workspace_bytes(tokens));
      const Tensor workspace =
          bytes > 0 ? empty({bytes}, {.dtype = DType::u8, .device = device}) : Tensor();
      kernels::cuda::embedding_backward<T>(
          grad_out.data<T>(), indices.data<int64_t>(), tokens, weight_meta_.shape[0],
          weight_meta_.shape[1], grad_weight.data<T>(),
          workspace.defined() ? workspace.raw_data() : nullptr, cuda::current_stream(device.index));
      return;
    }
#endif
    kernels::cpu::embedding_backward<T>(grad_out.data<T>(), indices.data<int64_t>(),
                                        indices.numel(), weight_meta_.shape[0],
                                        weight_meta_.shape[1], grad_weight.data<T>());
  });
  return {grad_weight};
}

bool EmbeddingBackward::accumulate_into(const std::vector<Tensor>& grads, Tensor& grad_weight) {
  if (!weight_meta_.device.is_cpu() || !grads[0].defined()) return false;
  const Tensor indices = indices_.unpack(*this);
  const Tensor grad_out = kernel_grad(grads[0], weight_meta_.dtype);
  dispatch_floating(weight_meta_.dtype, name(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::cpu::embedding_backward_add<T>(grad_out.data<T>(), indices.data<int64_t>(), indices.numel(),
                                            weight_meta_.shape[0], weight_meta_.shape[1], grad_weight.data<T>());
  });
  return true;
}

CrossEntropyBackward::CrossEntropyBackward(const Tensor& logits, const Tensor& targets,
                                           const Tensor& stats, int64_t ignore_index,
                                           double label_smoothing, int64_t counted)
    : logits_(logits),
      targets_(targets),
      stats_(stats),
      ignore_index_(ignore_index),
      label_smoothing_(label_smoothing),
      counted_(counted) {}

void CrossEntropyBackward::release_saved() {
  logits_.release();
  targets_.release();
  stats_.release();
}

std::vector<Tensor> CrossEntropyBackward::apply(std::vector<Tensor> grads) {
  const Tensor logits = logits_.unpack(*this);
  const Tensor targets = targets_.unpack(*this);
  const Tensor stats = stats_.unpack(*this);
  if (!grads[0].defined() || !needs_input_grad(0)) return {Tensor()};
  const TensorOptions options{.dtype = logits.dtype(), .device = logits.device()};
  if (logits.device().is_meta()) return {empty(logits.sizes(), options)};

  const int64_t rows = logits.size(0);
#ifdef DTR_WITH_CUDA
  if (logits.device().is_cuda()) {
    // dlogits is usually read next by a GEMM (the head's backward); when large and
    // 16-bit it gets the padded, 16-byte aligned rows the tensor cores read in place
    // (gemm_aligned_rows.h), instead of a contiguous tensor matmul would copy into them.
    Tensor grad_logits = empty_with_gemm_aligned_rows(logits.sizes(), options);
    // The kernel computes the scale on the device from the incoming gradient (as
    // double, exactly), so the backward never waits for the stream.
    const Device device = logits.device();
    cuda::DeviceGuard guard(device.index);
    const Tensor grad = grads[0].to(DType::f64).contiguous();
    dispatch_floating(logits.dtype(), name(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using Acc = acc_t<T>;
      const Acc* row_max = stats.data<Acc>();
      kernels::cuda::cross_entropy_backward<T>(
          logits.data<T>(), targets.data<int64_t>(), row_max, row_max + rows, rows, logits.size(1),
          ignore_index_, label_smoothing_, grad.data<double>(), counted_, grad_logits.data<T>(),
          grad_logits.stride(0), cuda::current_stream(device.index));
    });
    return {grad_logits};
  }
#endif
  Tensor grad_logits = empty(logits.sizes(), options);
  // d(mean loss)/d(row loss) = 1 / counted; with nothing counted every row is
  // ignored and gets 0 whatever the scale.
  const double scale = counted_ > 0 ? grads[0].item() / static_cast<double>(counted_) : 0.0;
  dispatch_floating(logits.dtype(), name(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const Acc* row_max = stats.data<Acc>();
    kernels::cpu::cross_entropy_backward<T>(logits.data<T>(), targets.data<int64_t>(), row_max,
                                            row_max + rows, rows, logits.size(1), ignore_index_,
                                            label_smoothing_, scale, grad_logits.data<T>());
  });
  return {grad_logits};
}

}  // namespace dtr::ops
