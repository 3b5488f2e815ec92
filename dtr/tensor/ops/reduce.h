// Reductions of a Tensor: sum, mean, max, min and argmax, over the whole tensor
// or over chosen dims, with PyTorch's semantics:
//   - dims may be negative and must not repeat; an empty dims list means every
//     dim (like torch.sum(t, dim=[])). A 0-d tensor accepts dim 0 or -1.
//   - keepdim keeps each reduced dim as size 1; otherwise reduced dims are removed.
//   - sum of an integer tensor (i32, i64, u8) is i64; otherwise results keep the
//     input dtype. Half inputs accumulate in float; sums are pairwise.
//   - mean needs a floating dtype. Reducing nothing gives sum 0 and mean NaN;
//     max/min/argmax over an empty dim are errors.
//   - max/min(t, dim) return only the values; argmax returns i64 indices (the
//     first maximum; a NaN counts as the maximum). argmax(t) is the flat index
//     into the row-major order of t, as a 0-d tensor.
// Results are new contiguous tensors on the input's device: cpu, or (in CUDA
// builds) cuda, computed on the device's current stream by dtr/kernels/cuda/reduce.h.
// Both are bitwise reproducible run to run; float sums on the two devices add in
// different orders, so they agree within rounding, while max/min/argmax (up to
// the sign of a zero) and integer sums agree exactly. Meta inputs give meta outputs of the right shape
// and dtype without computing anything.
//
// Autograd (floating inputs): sum and mean send the output gradient back to every
// reduced element (divided by the count for mean); max/min over a dim send it to
// the position argmax picks (the first max, or first min); whole-tensor max/min
// split it evenly among all elements equal to the result, like PyTorch. argmax
// results never require grad.
#pragma once

#include "dtr/tensor/tensor.h"

#include <cstdint>
#include <vector>

namespace dtr {

Tensor sum(const Tensor& t);
Tensor sum(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim = false);

Tensor mean(const Tensor& t);
Tensor mean(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim = false);

Tensor max(const Tensor& t);
Tensor max(const Tensor& t, int64_t dim, bool keepdim = false);

Tensor min(const Tensor& t);
Tensor min(const Tensor& t, int64_t dim, bool keepdim = false);

Tensor argmax(const Tensor& t);
Tensor argmax(const Tensor& t, int64_t dim, bool keepdim = false);

}  // namespace dtr
