// Random numbers for tensors: Generator (the seed and offset of a counter-based
// Philox4x32-10 stream), the process-wide default generator, the in-place fills
// uniform_, normal_ and trunc_normal_, and the rand/randn factories.
//
// Every value is a pure function of (seed, offset, logical element index); the
// exact counter scheme is in dtr/kernels/philox.h. A fill may write only a box of a
// larger logical row-major tensor (LogicalSlice): the box gets exactly the values
// a fill of the whole logical tensor would put there. This is how FSDP's meta-
// device init works: each rank fills only its shard (dtr/nn/init.h passes a sharded
// parameter's slice), and the values equal the unsharded init bit for bit,
// whatever the world size.
//
// Each fill reads its generator's (seed, offset) and then moves the offset on by
// kernels::philox_offset_advance(logical numel) = ceil(numel / 2), the same on
// every rank whatever the local box (also for meta tensors and empty boxes, which
// write nothing). Successive fills therefore draw from disjoint counters, and ranks
// that make the same sequence of fills stay in step. A generator is thread-safe:
// concurrent fills each claim their own offset range.
//
// The default generator starts at seed kDefaultSeed (PyTorch's default seed), so
// unseeded ranks agree; manual_seed() reseeds it and resets its offset to 0.
// Fills take floating dtypes only (f32, f64, bf16, f16); bf16 and f16 compute in
// float and round once, f64 draws 53-bit uniforms. The destination must not have
// overlapping elements (no stride-0 dims of size > 1). Fills run on cpu and cuda
// tensors (dtr/kernels/cuda/random.h: uniform_ gives the CPU's values bit for bit;
// normal_ and trunc_normal_ use CUDA's log/cos/sin and inverse normal CDF, so they
// agree with the CPU to a few ulp), and only advance the generator on meta.
#pragma once

#include "dtr/tensor/tensor.h"

#include <cstdint>
#include <mutex>

namespace dtr {

// What a checkpoint saves to resume a generator exactly.
struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;

  friend bool operator==(const GeneratorState&, const GeneratorState&) = default;
};

class Generator {
 public:
  static constexpr uint64_t kDefaultSeed = 67280421310721ULL;

  explicit Generator(uint64_t seed = kDefaultSeed) : state_{seed, 0} {}
  Generator(const Generator& other) : state_(other.state()) {}
  Generator& operator=(const Generator& other);

  void manual_seed(uint64_t seed);  // sets the seed and resets the offset to 0
  uint64_t seed() const { return state().seed; }
  uint64_t offset() const { return state().offset; }
  GeneratorState state() const;
  void set_state(const GeneratorState& state);

  // The state one fill of a logical tensor of `logical_numel` elements draws from;
  // moves the offset past it by philox_offset_advance(logical_numel).
  GeneratorState next_fill(int64_t logical_numel);

 private:
  mutable std::mutex mutex_;
  GeneratorState state_;
};

// The generator fills use when given none.
Generator& default_generator();
// default_generator().manual_seed(seed).
void manual_seed(uint64_t seed);

// Uniform on [lo, hi) (after rounding lo and hi to t's dtype; a value that rounding
// would lift to hi becomes the largest value below it). lo == hi fills lo.
const Tensor& uniform_(const Tensor& t, double lo = 0, double hi = 1, Generator* gen = nullptr,
                 const LogicalSlice& slice = {});
// Normal with the given mean and standard deviation (Box-Muller).
const Tensor& normal_(const Tensor& t, double mean = 0, double std = 1, Generator* gen = nullptr,
                const LogicalSlice& slice = {});
// Normal(mean, std) truncated to [a, b] (inverse CDF in double; a and b may be
// infinite). std == 0 fills mean clamped to [a, b].
const Tensor& trunc_normal_(const Tensor& t, double mean = 0, double std = 1, double a = -2, double b = 2,
                      Generator* gen = nullptr, const LogicalSlice& slice = {});

// A new tensor of `shape` filled with uniform_(t, 0, 1) / normal_(t, 0, 1).
Tensor rand(const Shape& shape, const TensorOptions& options = {}, Generator* gen = nullptr);
Tensor randn(const Shape& shape, const TensorOptions& options = {}, Generator* gen = nullptr);

}  // namespace dtr
