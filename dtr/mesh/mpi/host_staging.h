// HostStaging: the host memory MPI reads and writes for one operation. A CPU
// tensor is used in place and kept alive until the operation completes (a
// contiguous copy made for the call has no other owner). A CUDA tensor is staged
// through pinned host memory (dtr does not assume a CUDA-aware MPI): inputs are
// copied to the host before the MPI call, outputs are copied back to the GPU when
// the operation finishes.
// Also the host-side arithmetic the MPI backend adds around MPI's collectives:
// scaling for premul_sum, the division for avg, and combining received chunks.
#pragma once

#include "dtr/mesh/reduce_op.h"
#include "dtr/tensor/tensor.h"

#include <memory>
#include <vector>

namespace dtr::mesh::mpi {

class HostStaging {
 public:
  // Host memory holding `t`'s values (for MPI to read). After the collective the
  // staged copy is discarded.
  void* input(const Tensor& t);
  // Host memory for MPI to write `t`'s new values into; with `in_place`, it starts
  // with t's current values (all_reduce, broadcast). copy_back() moves it into t.
  void* output(const Tensor& t, bool in_place);
  // A scratch host buffer of `nbytes` (counted as comm_buffer memory).
  void* scratch(size_t nbytes);

  // Keeps `object` alive until the operation completes (e.g. MPI's count arrays).
  void keep(std::shared_ptr<void> object) { buffers_.push_back(std::move(object)); }

  // Copies staged outputs back to their GPU tensors (no-op for CPU tensors).
  void copy_back();
  // Everything MPI may still touch; the Work keeps it alive until completion.
  std::vector<std::shared_ptr<void>> keep_alive() const { return buffers_; }

 private:
  // A CPU tensor's own memory, kept alive with the operation.
  void* in_place(const Tensor& t);

  struct Pending {
    Tensor device_tensor;
    void* host = nullptr;
  };
  std::vector<std::shared_ptr<void>> buffers_;
  std::vector<Pending> copy_backs_;
};

// data[i] *= factor for `count` elements of a floating `dtype` (in f32 for bf16/f16).
void scale_in_place(void* data, int64_t count, DType dtype, double factor);
// data[i] /= divisor (integer division, truncating, for integer dtypes).
void divide_in_place(void* data, int64_t count, DType dtype, int64_t divisor);
// inout[i] = combine(in[i], inout[i]) for `count` elements: sum for sum, avg and
// premul_sum (their scaling is separate), max or min (NaN wins, as in dtr's
// kernels); bf16 and f16 combine in f32 and round once, like their MPI ops.
void combine_in_place(void* inout, const void* in, int64_t count, DType dtype, ReduceOp::Kind kind);

}  // namespace dtr::mesh::mpi
