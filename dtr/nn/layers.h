// Embedding, LayerNorm, RMSNorm and Dropout modules over the ops in tensor/ops.
// Embedding weights are normal(0, init_std) (PyTorch's default std is 1; the
// transformer passes 0.02); norm weights start at 1 and biases at 0.
#pragma once

#include "dtr/nn/module.h"

namespace dtr::nn {

struct LayerOptions {
  DType dtype = DType::f32;
  Device device = default_device();
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, double init_std = 1.0, const LayerOptions& options = {});
  std::string type_name() const override { return "Embedding"; }
  Tensor forward(const Tensor& indices) override;  // i64 indices of any shape -> [..., dim]

 protected:
  void reset_own_parameters() override;

 private:
  double init_std_;
  Parameter weight_;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool affine = true, const LayerOptions& options = {});
  std::string type_name() const override { return "LayerNorm"; }
  Tensor forward(const Tensor& x) override;

 protected:
  void reset_own_parameters() override;

 private:
  int64_t dim_;
  double eps_;
  bool affine_;
  Parameter weight_, bias_;  // affine only
};

class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6, const LayerOptions& options = {});
  std::string type_name() const override { return "RMSNorm"; }
  Tensor forward(const Tensor& x) override;

 protected:
  void reset_own_parameters() override;

 private:
  double eps_;
  Parameter weight_;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  std::string type_name() const override { return "Dropout"; }
  Tensor forward(const Tensor& x) override;

 private:
  double p_;
};

}  // namespace dtr::nn
