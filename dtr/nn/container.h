// Containers: Sequential (calls its children in order, each through operator()
// so their hooks run) and ModuleList (holds modules for a parent's own forward).
// Children are named "0", "1", ... as in PyTorch. Both allow replace_child (by
// that name) and set(i, module), e.g. to wrap a block for activation checkpointing.
#pragma once

#include "dtr/nn/module.h"

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
  // Replaces module i (the child named std::to_string(i)).
  void set(size_t i, ModulePtr module);

 protected:
  void on_replace_child(const std::string& name, const ModulePtr& old_module, const ModulePtr& new_module) override;

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
  // Replaces module i (the child named std::to_string(i)).
  void set(size_t i, ModulePtr module);

 protected:
  void on_replace_child(const std::string& name, const ModulePtr& old_module, const ModulePtr& new_module) override;

 private:
  std::vector<ModulePtr> modules_;
};

}  // namespace dtr::nn
