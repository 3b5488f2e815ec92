// The Hugging Face fixtures of tests/fixtures/hf (written by scripts/hf_fixtures.py
// with transformers): a fixture's directory, and the logits transformers computed
// for its recorded tokens.
#pragma once

#include "dtr/tensor/factory.h"
#include "dtr/tensor/tensor.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtr::testing {

inline std::filesystem::path hf_fixture(const std::string& name) {
  return std::filesystem::path(DTR_HF_FIXTURES) / name;
}

struct RecordedLogits {
  Tensor tokens;  // i64 [rows, seq]
  Shape shape;    // [rows, seq, vocab]
  std::vector<float> logits;
};

inline RecordedLogits recorded_logits(const std::string& fixture) {
  const auto path = hf_fixture(fixture) / "logits.json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  const auto json = nlohmann::json::parse(in);
  std::vector<int64_t> tokens;
  for (const auto& row : json.at("tokens")) {
    for (const auto& t : row) tokens.push_back(t.get<int64_t>());
  }
  const auto rows = static_cast<int64_t>(json.at("tokens").size());
  return {from_vector(tokens, {rows, static_cast<int64_t>(tokens.size()) / rows}), json.at("shape").get<Shape>(),
          json.at("logits").get<std::vector<float>>()};
}

// The largest difference of `logits` from the recorded ones, relative to the
// recorded ones' largest magnitude (infinite when the shapes differ).
inline double relative_logits_error(const Tensor& logits, const RecordedLogits& want) {
  if (logits.sizes() != want.shape) return INFINITY;
  const std::vector<float> got = logits.contiguous().to_vector<float>();
  double error = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    error = std::max(error, std::abs(static_cast<double>(got[i]) - want.logits[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want.logits[i])));
  }
  return error / scale;
}

}  // namespace dtr::testing
