// Compares a model trained sharded (FSDP, tensor parallelism, both) with the same
// model trained in one process: every parameter of the reference, by name, must
// have a counterpart whose global value (the full tensor of a sharded one) is
// within an absolute tolerance, element by element. Collective when parameters
// are sharded (full_tensor), so every rank calls it.
#pragma once

#include "dtr/nn/module.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace dtr::testing {

inline void require_same_parameters(const nn::Module& trained, const nn::Module& reference, double tolerance) {
  const auto sharded = trained.named_parameters();
  for (const auto& [name, p] : reference.named_parameters()) {
    INFO("parameter " << name);
    const std::string& wanted = name;  // a lambda may not capture a structured binding (clang before 16)
    const auto it = std::find_if(sharded.begin(), sharded.end(), [&](const auto& t) { return t.first == wanted; });
    REQUIRE(it != sharded.end());
    const Tensor full = it->second.is_sharded() ? it->second.as_dtensor().full_tensor() : it->second.data();
    const auto a = full.to_vector<double>(), b = p.data().to_vector<double>();
    REQUIRE(a.size() == b.size());
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
    CHECK(worst <= tolerance);
  }
}

}  // namespace dtr::testing
