#include "dtr/nn/optim/weight_decay_groups.h"

namespace dtr::nn::optim {

std::vector<ParamGroup> weight_decay_groups(const std::vector<Parameter>& params, double weight_decay) {
  std::vector<Parameter> matrices, vectors;
  for (const Parameter& p : params) (p.global_shape().size() >= 2 ? matrices : vectors).push_back(p);
  std::vector<ParamGroup> groups;
  if (!matrices.empty()) groups.push_back({std::move(matrices), {.weight_decay = weight_decay}});
  if (!vectors.empty()) groups.push_back({std::move(vectors), {.weight_decay = 0.0}});
  return groups;
}

}  // namespace dtr::nn::optim
