#include "dtr/dtensor/sharding/run_op.h"

#include "dtr/base/error.h"
#include "dtr/base/log.h"
#include "dtr/dtensor/sharding/grad_sync.h"
#include "dtr/dtensor/sharding/rule_cache.h"

#include <mutex>
#include <set>

namespace dtr::dtensor {

void check_same_mesh(std::string_view op, const std::vector<const DTensor*>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    DTR_CHECK(inputs[i]->defined(), "dtensor::{}: DTensor input {} is undefined", op, i);
    DTR_CHECK(inputs[i]->device_mesh() == inputs[0]->device_mesh(),
              "dtensor::{}: every DTensor input must be on the same mesh, but input 0 is on {} and input {} is on {}", op,
              inputs[0]->device_mesh().to_string(), i, inputs[i]->device_mesh().to_string());
  }
}

void warn_fallback_once(std::string_view op, const std::vector<const DTensorSpec*>& inputs) {
  static std::mutex mutex;
  static std::set<std::string, std::less<>> warned;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!warned.emplace(op).second) return;
  }
  std::string specs;
  for (const DTensorSpec* s : inputs) specs += (specs.empty() ? "" : ", ") + s->to_string();
  DTR_LOG_WARN("dtensor::{}: no sharding rule for inputs {}; redistributing them to Replicate (on the mesh dims "
               "no rule covers) and computing there on every rank (logged once per op)",
               op, specs);
}

PreparedOp prepare_op(std::string_view op, const std::string& args, const std::vector<const DTensor*>& inputs,
                      const std::function<OpSharding(const std::vector<const DTensorSpec*>&)>& rule) {
  check_same_mesh(op, inputs);
  std::vector<const DTensorSpec*> specs;
  specs.reserve(inputs.size());
  for (const DTensor* d : inputs) specs.push_back(&d->spec());
  PreparedOp prepared{cached_sharding(op, args, specs, [&] { return rule(specs); }), {}, inputs[0]->device_mesh()};
  const OpSharding& s = prepared.sharding;
  DTR_INTERNAL_ASSERT(s.inputs.size() == inputs.size(), "dtensor::{}: rule gave {} input placements for {} inputs", op,
                      s.inputs.size(), inputs.size());
  if (s.fallback) warn_fallback_once(op, specs);
  for (size_t j = 0; j < inputs.size(); ++j) {
    Tensor local = inputs[j]->redistribute(s.inputs[j]).to_local();
    std::vector<int> sync_dims;
    for (int i = 0; i < prepared.mesh.ndim(); ++i) {
      if (s.inputs[j][i].is_replicate() && !s.output[i].is_replicate()) sync_dims.push_back(i);
    }
    prepared.locals.push_back(all_reduce_grad(local, prepared.mesh, std::move(sync_dims)));
  }
  return prepared;
}

DTensor wrap_result(const PreparedOp& prepared, const Tensor& local) {
  return DTensor(local, DTensorSpec::make(prepared.mesh, prepared.sharding.output, prepared.sharding.shape,
                                          local.dtype()));
}

}  // namespace dtr::dtensor
