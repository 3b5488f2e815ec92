#include "nn/container.h"

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

Tensor ModuleList::forward(const Tensor&) {
  DTR_FAIL("ModuleList has no forward: call its modules from the parent's forward");
}

}  // namespace dtr::nn
