// DistributedSampler: which samples each rank reads for every global batch.
//
// An epoch is a permutation of the sample indices [0, num_samples) (the identity
// when shuffle is off), drawn from (seed, epoch) with a Fisher-Yates shuffle over
// a splitmix64 stream, so it is the same on every rank, machine and standard
// library. Global batch b of an epoch is permutation entries [b * B, (b + 1) * B)
// (B = global_batch); rank r of W reads the contiguous slice
// [r * B / W, (r + 1) * B / W) of it, so the ranks' slices are disjoint and
// together are the whole global batch. A last partial global batch is dropped
// (batches_per_epoch = num_samples / B); after the last batch the sampler moves
// to the next epoch by itself.
//
// position() counts the global batches consumed since epoch 0 began
// (epoch * batches_per_epoch + batch within the epoch); set_position(p) resumes
// exactly there, so a restarted job reads the same batches as an uninterrupted one.
// set_epoch(e) jumps to the first batch of epoch e.
#pragma once

#include <cstdint>
#include <vector>

namespace dtr::train {

class DistributedSampler {
 public:
  // Errors (std::invalid_argument): global_batch not divisible by world_size,
  // rank out of range, or fewer samples than one global batch.
  DistributedSampler(int64_t num_samples, int64_t global_batch, int rank, int world_size, uint64_t seed,
                     bool shuffle = true);

  int64_t num_samples() const { return num_samples_; }
  int64_t global_batch() const { return global_batch_; }
  int64_t local_batch() const { return global_batch_ / world_size_; }
  int64_t batches_per_epoch() const { return num_samples_ / global_batch_; }

  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }
  int64_t position() const { return epoch_ * batches_per_epoch() + batch_; }
  void set_position(int64_t position);

  // This rank's sample indices for the next global batch (local_batch() of them); advances.
  std::vector<int64_t> next();
  // Every rank's slice of global batch `batch` of `epoch`, in rank order (no state change).
  std::vector<int64_t> global_batch_indices(int64_t epoch, int64_t batch) const;

 private:
  const std::vector<int64_t>& permutation(int64_t epoch) const;

  int64_t num_samples_, global_batch_;
  int rank_, world_size_;
  uint64_t seed_;
  bool shuffle_;
  int64_t epoch_ = 0, batch_ = 0;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_;
};

}  // namespace dtr::train
