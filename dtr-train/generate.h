// Text generation from a (possibly fully_shard-ed) decoder: greedy, or seeded
// top-k sampling with a temperature.
//
// A sharded model's forward is collective (it all-gathers parameters), so every
// rank of `group` must call generate() with the same prompt and options: each
// step runs the same forward on every rank, rank 0 picks the next token, and a
// broadcast gives it to the others, so the ranks never disagree about the
// sequence (and so about the next collective), even if their logits differ in
// the last bit. The context is the last `context` tokens.
#pragma once

#include "dtr/mesh/process_group.h"
#include "dtr/nn/module.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dtr::train {

struct GenerateOptions {
  int64_t max_new_tokens = 200;
  int64_t top_k = 0;  // 0: greedy
  double temperature = 1.0;
  uint64_t seed = 0;
  int64_t context = 64;
  Device device = Device::cpu();  // where the model computes (the prompt window goes there)
  // Sequence parallelism: the window is padded on the right to a multiple of this;
  // the model is causal, so the last token's logits do not see the padding.
  int64_t length_multiple = 1;
  // Loss parallelism: the model returns this rank's vocabulary slice of the
  // logits; this makes one position's [V_r] slice the whole [V] row (collective).
  std::function<Tensor(const Tensor&)> whole_vocabulary;
};

// Returns the prompt followed by the generated tokens.
std::vector<int64_t> generate(nn::Module& model, std::vector<int64_t> prompt, const GenerateOptions& options,
                              const mesh::ProcessGroupPtr& group);

// Byte tokens as text (control bytes other than newline and tab shown as '?');
// other vocabularies as space-separated ids (dtr-train has no GPT-2 tokenizer).
std::string decode_tokens(const std::vector<int64_t>& tokens, int64_t vocab_size);

}  // namespace dtr::train
