#include "sampler.h"

#include <fmt/format.h>

#include <numeric>
#include <stdexcept>

namespace dtr::train {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, bound) without modulo bias (rejection sampling).
uint64_t uniform_below(uint64_t& state, uint64_t bound) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x = 0;
  do {
    x = splitmix64(state);
  } while (x >= limit);
  return x % bound;
}

}  // namespace

DistributedSampler::DistributedSampler(int64_t num_samples, int64_t global_batch, int rank, int world_size,
                                       uint64_t seed, bool shuffle)
    : num_samples_(num_samples),
      global_batch_(global_batch),
      rank_(rank),
      world_size_(world_size),
      seed_(seed),
      shuffle_(shuffle) {
  if (world_size <= 0 || rank < 0 || rank >= world_size) {
    throw std::invalid_argument(fmt::format("sampler: rank {} out of range for world size {}", rank, world_size));
  }
  if (global_batch <= 0 || global_batch % world_size != 0) {
    throw std::invalid_argument(
        fmt::format("sampler: global batch {} is not a positive multiple of the world size {}", global_batch,
                    world_size));
  }
  if (num_samples < global_batch) {
    throw std::invalid_argument(
        fmt::format("sampler: {} samples are fewer than one global batch of {}", num_samples, global_batch));
  }
}

void DistributedSampler::set_epoch(int64_t epoch) {
  if (epoch < 0) throw std::invalid_argument(fmt::format("sampler: negative epoch {}", epoch));
  epoch_ = epoch;
  batch_ = 0;
}

void DistributedSampler::set_position(int64_t position) {
  if (position < 0) throw std::invalid_argument(fmt::format("sampler: negative position {}", position));
  epoch_ = position / batches_per_epoch();
  batch_ = position % batches_per_epoch();
}

const std::vector<int64_t>& DistributedSampler::permutation(int64_t epoch) const {
  if (cached_epoch_ == epoch) return cached_;
  cached_.resize(static_cast<size_t>(num_samples_));
  std::iota(cached_.begin(), cached_.end(), int64_t{0});
  if (shuffle_) {
    uint64_t state = seed_ * 0x100000001B3ull ^ (static_cast<uint64_t>(epoch) + 0x5851F42D4C957F2Dull);
    splitmix64(state);
    for (int64_t i = num_samples_ - 1; i > 0; --i) {
      const auto j = static_cast<int64_t>(uniform_below(state, static_cast<uint64_t>(i + 1)));
      std::swap(cached_[static_cast<size_t>(i)], cached_[static_cast<size_t>(j)]);
    }
  }
  cached_epoch_ = epoch;
  return cached_;
}

std::vector<int64_t> DistributedSampler::next() {
  const auto& perm = permutation(epoch_);
  const int64_t start = batch_ * global_batch_ + rank_ * local_batch();
  std::vector<int64_t> out(perm.begin() + start, perm.begin() + start + local_batch());
  if (++batch_ == batches_per_epoch()) {
    ++epoch_;
    batch_ = 0;
  }
  return out;
}

std::vector<int64_t> DistributedSampler::global_batch_indices(int64_t epoch, int64_t batch) const {
  const auto& perm = permutation(epoch);
  const int64_t start = batch * global_batch_;
  return {perm.begin() + start, perm.begin() + start + global_batch_};
}

}  // namespace dtr::train
