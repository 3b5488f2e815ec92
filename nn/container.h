// Containers: Sequential (calls its children in order, each through operator()
// so their hooks run) and ModuleList (holds modules for a parent's own forward).
// Children are named "0", "1", ... as in PyTorch.
#pragma once

#include "nn/module.h"

#include <initializer_list>

namespace dtr::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<ModulePtr> modules);
  std::string type_name() const override { return "Sequential"; }
  Tensor forward(const Tensor& input) override;
  void push_back(ModulePtr module);
  size_t size() const { return modules_.size(); }
  Module& operator[](size_t i) const;

 private:
  std::vector<ModulePtr> modules_;
};

class ModuleList : public Module {
 public:
  std::string type_name() const override { return "ModuleList"; }
  Tensor forward(const Tensor& input) override;  // an error: iterate the list instead
  void push_back(ModulePtr module);
  size_t size() const { return modules_.size(); }
  Module& operator[](size_t i) const;
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  std::vector<ModulePtr> modules_;
};

}  // namespace dtr::nn
