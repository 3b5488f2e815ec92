#include "dtr/nn/parameter.h"

#include "dtr/base/error.h"

namespace dtr::nn {

Parameter::Parameter(Tensor value) : slot_(std::make_shared<Slot>(Slot{std::move(value), std::nullopt, nullptr})) {}

const Tensor& Parameter::data() const {
  DTR_CHECK(slot_ != nullptr, "Parameter: this handle names no parameter (it was default-constructed; keep the "
                              "handle Module::register_parameter returns)");
  return slot_->value;
}

const Tensor& Parameter::in_use() const {
  const Tensor& own = data();
  return slot_->installed ? *slot_->installed : own;
}

const DTensorSpec* Parameter::sharding() const { return slot_ ? slot_->sharding.get() : nullptr; }

Shape Parameter::global_shape() const { return is_sharded() ? sharding()->shape : data().sizes(); }

LogicalSlice Parameter::logical_slice() const {
  const DTensorSpec* spec = sharding();
  if (spec == nullptr) return {};
  return LogicalSlice{.logical_shape = spec->shape, .offset = spec->local_offset()};
}

DTensor Parameter::as_dtensor() const {
  const DTensorSpec* spec = sharding();
  DTR_CHECK(spec != nullptr, "Parameter::as_dtensor: the parameter (shape {}) is not sharded",
            shape_str(data().sizes()));
  return DTensor(data(), *spec);
}

std::vector<Parameter> as_parameters(const std::vector<Tensor>& tensors) {
  std::vector<Parameter> out;
  out.reserve(tensors.size());
  for (const Tensor& t : tensors) out.emplace_back(t);
  return out;
}

}  // namespace dtr::nn
