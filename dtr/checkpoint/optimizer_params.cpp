#include "dtr/checkpoint/optimizer_params.h"

#include "dtr/base/error.h"
#include "dtr/fsdp/fully_shard.h"

#include <algorithm>

namespace dtr::checkpoint {

std::vector<std::pair<std::string, nn::Parameter>> optimizer_params_in(const nn::optim::Optimizer& optimizer,
                                                                       nn::Module& module, const char* what) {
  fsdp::reshard_all(module);
  auto named = module.named_parameters();
  std::vector<std::pair<std::string, nn::Parameter>> out;
  for (size_t i = 0; i < optimizer.params().size(); ++i) {
    const nn::Parameter& p = optimizer.params()[i];
    auto it = std::find_if(named.begin(), named.end(), [&](const auto& np) {
      return np.second.same_slot(p) || np.second.data().is_same(p.data());
    });
    DTR_CHECK(it != named.end(),
              "{}: optimizer parameter {} (shape {}) is not a parameter of the module (build the optimizer from "
              "model.parameters() after fully_shard)",
              what, i, shape_str(p.data().sizes()));
    out.push_back(*it);
  }
  return out;
}

}  // namespace dtr::checkpoint
