#include "nn/parameter.h"

#include "base/error.h"

namespace dtr::nn {

const Tensor& Parameter::data() const {
  DTR_CHECK(slot_ != nullptr, "Parameter: this handle names no parameter (it was default-constructed; keep the "
                              "handle Module::register_parameter returns)");
  return *slot_;
}

}  // namespace dtr::nn
