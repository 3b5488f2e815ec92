#include "dtr/nn/container.h"

#include <string>

namespace dtr::nn {

Sequential::Sequential(std::initializer_list<ModulePtr> modules) {
  for (const ModulePtr& m : modules) push_back(m);
}

void Sequential::push_back(ModulePtr module) {
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

Module& Sequential::operator[](size_t i) const {
  DTR_CHECK(i < modules_.size(), "Sequential: index {} out of range for {} modules", i, modules_.size());
  return *modules_[i];
}

void Sequential::set(size_t i, ModulePtr module) {
  DTR_CHECK(i < modules_.size(), "Sequential: index {} out of range for {} modules", i, modules_.size());
  replace_child(std::to_string(i), std::move(module));
}

void Sequential::on_replace_child(const std::string& name, const ModulePtr& old_module, const ModulePtr& new_module) {
  const size_t i = std::stoul(name);  // children are named by their index
  DTR_INTERNAL_ASSERT(i < modules_.size() && modules_[i] == old_module, "Sequential: child '{}' is not module {}", name, i);
  modules_[i] = new_module;
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const ModulePtr& m : modules_) x = (*m)(x);
  return x;
}

void ModuleList::push_back(ModulePtr module) {
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

Module& ModuleList::operator[](size_t i) const {
  DTR_CHECK(i < modules_.size(), "ModuleList: index {} out of range for {} modules", i, modules_.size());
  return *modules_[i];
}

void ModuleList::set(size_t i, ModulePtr module) {
  DTR_CHECK(i < modules_.size(), "ModuleList: index {} out of range for {} modules", i, modules_.size());
  replace_child(std::to_string(i), std::move(module));
}

void ModuleList::on_replace_child(const std::string& name, const ModulePtr& old_module, const ModulePtr& new_module) {
  const size_t i = std::stoul(name);  // children are named by their index
  DTR_INTERNAL_ASSERT(i < modules_.size() && modules_[i] == old_module, "ModuleList: child '{}' is not module {}", name, i);
  modules_[i] = new_module;
}

Tensor ModuleList::forward(const Tensor&) {
  DTR_FAIL("ModuleList has no forward: call its modules from the parent's forward");
}

}  // namespace dtr::nn
