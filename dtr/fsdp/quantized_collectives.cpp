#include "dtr/fsdp/quantized_collectives.h"

#include "dtr/base/error.h"
#include "dtr/fsdp/reshard_after_forward.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/quantize.h"
#include "dtr/tensor/profiler.h"

#include <fmt/format.h>

#include <memory>
#include <vector>

namespace dtr::fsdp {

HostGroups make_host_groups(const QuantizedCommPolicy& policy, const mesh::DeviceMesh& mesh, const std::string& what) {
  if (!policy.weights && policy.gradient_bits == 0) return {};
  const auto& shard_group = mesh.group(mesh.ndim() - 1);
  const int n = shard_group->size();
  const int k = policy.host_size == 0 ? reshard_to_host_size(mesh) : policy.host_size;
  DTR_CHECK(k >= 1 && n % k == 0,
            "fully_shard({}): quantized_comm.host_size {} must divide the shard dim's {} ranks of {}", what, k, n,
            mesh.to_string());
  if (k == n) return {.hosts = 1, .host_size = k};
  const int rank = shard_group->rank();
  HostGroups groups{.hosts = n / k, .host_size = k};
  groups.within = shard_group->split(rank / k, rank % k, fmt::format("host of {}", k));
  groups.across = shard_group->split(rank % k, rank / k, fmt::format("across {} hosts", n / k));
  return groups;
}

namespace {

TensorOptions on(const TensorOptions& options, DType dtype) {
  return {.dtype = dtype, .device = options.device, .tag = MemoryTag::comm_buffer};
}

// How a per-rank buffer is quantized: each parameter's segment in blocks of its
// own, so that no block mixes two parameters' magnitudes (a norm's ones beside a
// projection's small weights), and `count` such buffers' codes and scales back to
// back.
class QuantizedBuffers {
 public:
  QuantizedBuffers(const FlatCollectives& flat, int64_t count, int64_t block, int bits, const TensorOptions& options)
      : flat_(flat), block_(block), bits_(bits) {
    for (size_t i = 0; i < flat.segments(); ++i) {
      segments_.push_back({code_bytes_, blocks_});
      code_bytes_ += block_quantized_code_bytes(flat.segment_numel(i), bits);
      blocks_ += block_quantized_blocks(flat.segment_numel(i), block);
    }
    codes = dtr::empty({count * code_bytes_}, on(options, DType::u8));
    absmax = dtr::empty({count * blocks_}, on(options, DType::f32));
  }

  int64_t code_bytes() const { return code_bytes_; }
  int64_t blocks() const { return blocks_; }
  // Buffer b's codes and scales from `values` (one per-rank buffer), or back.
  void quantize(const Tensor& values, int64_t b) const {
    for (size_t i = 0; i < segments_.size(); ++i) block_quantize_into(segment_values(values, i), segment(b, i));
  }
  void dequantize(int64_t b, const Tensor& values) const {
    for (size_t i = 0; i < segments_.size(); ++i) block_dequantize_into(segment(b, i), segment_values(values, i));
  }

  Tensor codes, absmax;  // [count x code_bytes()] and [count x blocks()]

 private:
  struct Segment {
    int64_t code_at, block_at;  // within one buffer's codes and scales
  };
  Tensor segment_values(const Tensor& values, size_t i) const {
    return values.narrow(0, flat_.segment_offset(i), flat_.segment_numel(i));
  }
  BlockQuantized segment(int64_t b, size_t i) const {
    const int64_t numel = flat_.segment_numel(i);
    return {.codes = codes.narrow(0, b * code_bytes_ + segments_[i].code_at, block_quantized_code_bytes(numel, bits_)),
            .absmax = absmax.narrow(0, b * blocks_ + segments_[i].block_at, block_quantized_blocks(numel, block_)),
            .numel = numel, .block = block_, .bits = bits_};
  }

  const FlatCollectives& flat_;
  int64_t block_;
  int bits_;
  std::vector<Segment> segments_;
  int64_t code_bytes_ = 0, blocks_ = 0;
};

// The op within the host: the whole op's scaling applied there (each gradient is
// scaled once, before any sum, as premul_sum does), the sum across hosts plain.
mesh::ReduceOp within_host_op(mesh::ReduceOp op, int64_t ranks) {
  switch (op.kind) {
    case mesh::ReduceOp::Kind::sum: return op;
    case mesh::ReduceOp::Kind::premul_sum: return op;
    case mesh::ReduceOp::Kind::avg: return mesh::ReduceOp::premul_sum(1.0 / static_cast<double>(ranks));
    default: DTR_FAIL("quantized reduce-scatter: expected a sum, an average or a premultiplied sum");
  }
}

}  // namespace

PendingCollective quantized_all_gather(const FlatCollectives& flat, const HostGroups& hosts,
                                       const TensorOptions& options, int64_t block) {
  autograd::NoGradGuard no_grad;
  const int64_t h = hosts.hosts, numel = flat.numel(), me = hosts.across->rank();
  Tensor staged = dtr::empty({h * numel}, options);  // the buffers of this rank's counterparts, host by host
  Tensor own = staged.narrow(0, me * numel, numel);
  flat.copy_shards_into(own);
  QuantizedBuffers mine(flat, 1, block, 8, options);
  auto gathered = std::make_shared<QuantizedBuffers>(flat, h, block, 8, options);
  {
    DTR_PROFILE_SCOPE("fsdp", "all_gather quantize");
    mine.quantize(own, 0);
  }
  const auto& across = hosts.across;
  mesh::WorkPtr work = mesh::make_work_list({across->all_gather_into_tensor(gathered->codes, mine.codes),
                                             across->all_gather_into_tensor(gathered->absmax, mine.absmax)},
                                            "quantized all_gather across hosts");
  Tensor output = dtr::empty({flat.ranks() * numel}, options);
  PendingCollective pending{work, {mine.codes, mine.absmax}, output, h, nullptr};
  pending.finish = [h, me, numel, staged, gathered, output, within = hosts.within] {
    {
      DTR_PROFILE_SCOPE("fsdp", "all_gather dequantize");
      for (int64_t b = 0; b < h; ++b) {
        if (b != me) gathered->dequantize(b, staged.narrow(0, b * numel, numel));
      }
    }
    within->all_gather_into_tensor(output, staged)->wait();
  };
  return pending;
}

PendingCollective quantized_reduce_scatter(const FlatCollectives& flat, const HostGroups& hosts, mesh::ReduceOp op,
                                           const TensorOptions& options, int64_t block, int bits,
                                           const Tensor& residual) {
  autograd::NoGradGuard no_grad;
  const int64_t h = hosts.hosts, numel = flat.numel(), me = hosts.across->rank();
  Tensor partial = dtr::empty({h * numel}, options);  // this host's sums of the counterparts' buffers
  {
    Tensor input = flat.gradients_by_rank(options, h);
    hosts.within->reduce_scatter_tensor(partial, input, within_host_op(op, flat.ranks()))->wait();
  }
  QuantizedBuffers sent(flat, h, block, bits, options);
  auto received = std::make_shared<QuantizedBuffers>(flat, h, block, bits, options);
  {
    DTR_PROFILE_SCOPE("fsdp", "reduce_scatter quantize");
    Tensor received_back;  // what the counterpart will read, to keep the rest
    for (int64_t b = 0; b < h; ++b) {
      if (b == me) continue;
      Tensor row = partial.narrow(0, b * numel, numel);
      if (!residual.defined()) {
        sent.quantize(row, b);
        continue;
      }
      // Error feedback: send this sum plus what earlier steps' codes left out, and keep
      // what these codes leave out.
      Tensor carried = residual.narrow(0, b * numel, numel);
      add_(carried, row.dtype() == DType::f32 ? row : row.to(DType::f32));
      sent.quantize(carried, b);
      if (!received_back.defined()) received_back = dtr::empty({numel}, on(options, DType::f32));
      sent.dequantize(b, received_back);
      sub_(carried, received_back);
    }
    // This rank's own share goes to itself and is never read: its exact sum is used.
    sent.codes.narrow(0, me * sent.code_bytes(), sent.code_bytes()).zero_();
    sent.absmax.narrow(0, me * sent.blocks(), sent.blocks()).zero_();
  }
  const auto& across = hosts.across;
  mesh::WorkPtr work = mesh::make_work_list(
      {across->all_to_all_single(received->codes.view({h, sent.code_bytes()}), sent.codes.view({h, sent.code_bytes()})),
       across->all_to_all_single(received->absmax.view({h, sent.blocks()}), sent.absmax.view({h, sent.blocks()}))},
      "quantized all_to_all across hosts");
  Tensor output = dtr::empty({numel}, options);
  PendingCollective pending{work, {sent.codes, sent.absmax}, output, 1, nullptr};
  pending.finish = [h, me, numel, partial, received, output, f32 = on(options, DType::f32)] {
    DTR_PROFILE_SCOPE("fsdp", "reduce_scatter dequantize");
    Tensor sum = output.dtype() == DType::f32 ? output : dtr::empty({numel}, f32);
    Tensor part = dtr::empty({numel}, f32);
    for (int64_t b = 0; b < h; ++b) {
      Tensor into = b == 0 ? sum : part;
      if (b == me) {
        into.copy_(partial.narrow(0, me * numel, numel));
      } else {
        received->dequantize(b, into);
      }
      if (b > 0) add_(sum, part);
    }
    if (!sum.is_same(output)) output.copy_(sum);
  };
  return pending;
}

}  // namespace dtr::fsdp
