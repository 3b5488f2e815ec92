// Range check of an int64 index buffer on a CUDA device (embedding indices,
// cross_entropy targets), so that the op layer can raise the same dtr::Error as
// on the CPU while reading back only two numbers instead of every index.
//
// check_indices(indices, n, bound, has_ignore, ignore_index, result, stream)
// writes two int64 values into `result` (device memory):
//   result[0] = n - p, for the first (lowest) position p whose index is not in
//               [0, bound) and is not ignore_index (when has_ignore); 0 when
//               every index is fine;
//   result[1] = how many positions hold an index other than ignore_index (n when
//               !has_ignore), bad ones included.
// Both are folded with integer atomics (max, add), whose results do not depend
// on the order the threads run in. The launcher zeroes `result` itself (also
// when n == 0), enqueues on `stream` and returns without synchronizing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dtr::kernels::cuda {

void check_indices(const int64_t* indices, int64_t n, int64_t bound, bool has_ignore,
                   int64_t ignore_index, int64_t* result, cudaStream_t stream);

}  // namespace dtr::kernels::cuda
