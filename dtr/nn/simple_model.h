// SimpleModel: a small example model, Linear(1024 -> 1024), ReLU,
// Linear(1024 -> 10) (sizes configurable), ready to train or shard.
#pragma once

#include "dtr/nn/activation.h"
#include "dtr/nn/container.h"
#include "dtr/nn/linear.h"

namespace dtr::nn {

class SimpleModel : public Module {
 public:
  explicit SimpleModel(int64_t in_features = 1024, int64_t hidden = 1024, int64_t classes = 10,
                       const LinearOptions& options = {})
      : fc1_(register_module("fc1", std::make_shared<Linear>(in_features, hidden, options))),
        act_(register_module("relu", std::make_shared<ReLU>())),
        fc2_(register_module("fc2", std::make_shared<Linear>(hidden, classes, options))) {}
  std::string type_name() const override { return "SimpleModel"; }
  Tensor forward(const Tensor& x) override { return (*fc2_)((*act_)((*fc1_)(x))); }

 private:
  std::shared_ptr<Linear> fc1_;
  std::shared_ptr<ReLU> act_;
  std::shared_ptr<Linear> fc2_;
};

}  // namespace dtr::nn
