#include "generate.h"

#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>

namespace dtr::train {

namespace {

int64_t pick(const std::vector<float>& logits, const GenerateOptions& o, std::mt19937_64& rng) {
  if (o.top_k <= 0) {
    return std::max_element(logits.begin(), logits.end()) - logits.begin();
  }
  const auto k = static_cast<size_t>(std::min<int64_t>(o.top_k, static_cast<int64_t>(logits.size())));
  std::vector<int64_t> order(logits.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](int64_t a, int64_t b) { return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)]; });
  std::vector<double> weights(k);
  const double top = logits[static_cast<size_t>(order[0])];
  for (size_t i = 0; i < k; ++i) {
    weights[i] = std::exp((logits[static_cast<size_t>(order[i])] - top) / o.temperature);
  }
  std::discrete_distribution<size_t> dist(weights.begin(), weights.end());
  return order[dist(rng)];
}

}  // namespace

std::vector<int64_t> generate(nn::Module& model, std::vector<int64_t> tokens, const GenerateOptions& o,
                              const mesh::ProcessGroupPtr& group) {
  if (tokens.empty()) throw std::invalid_argument("generate: the prompt must have at least one token");
  autograd::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  std::mt19937_64 rng(o.seed);
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    const auto n = static_cast<int64_t>(tokens.size());
    const int64_t len = std::min(n, o.context);
    std::vector<int64_t> window(tokens.end() - len, tokens.end());
    window.resize(static_cast<size_t>((len + o.length_multiple - 1) / o.length_multiple * o.length_multiple), 0);
    const auto padded = static_cast<int64_t>(window.size());
    Tensor logits = model(from_vector(window, {1, padded}).to(o.device));  // [1, padded, V]
    Tensor row = logits.select(1, len - 1).select(0, 0).contiguous();
    if (o.whole_vocabulary) row = o.whole_vocabulary(row);
    std::vector<float> last = row.to(DType::f32).to(Device::cpu()).contiguous().to_vector<float>();
    Tensor next = from_vector(std::vector<int64_t>{group->rank() == 0 ? pick(last, o, rng) : 0}, {1});
    group->broadcast(next, 0)->wait();
    tokens.push_back(next.item<int64_t>());
  }
  model.train(was_training);
  return tokens;
}

std::string decode_tokens(const std::vector<int64_t>& tokens, int64_t vocab_size) {
  std::string out;
  if (vocab_size <= 256) {
    for (const int64_t t : tokens) {
      const auto c = static_cast<unsigned char>(t);
      out += (c == '\n' || c == '\t' || (c >= 32 && c < 127)) ? static_cast<char>(c) : '?';
    }
    return out;
  }
  for (size_t i = 0; i < tokens.size(); ++i) out += fmt::format("{}{}", i ? " " : "", tokens[i]);
  return out;
}

}  // namespace dtr::train
