// Where each tensor of an nn::Transformer lives in a Hugging Face transformers
// checkpoint (GPT-2 or Llama) and how its layout differs there, and the
// conversions between the two for any box of the tensor (see hf_weights.h).
#pragma once

#include "dtr/checkpoint/box.h"
#include "dtr/nn/transformer.h"

#include <map>
#include <string>

namespace dtr::checkpoint {

struct HfSource {
  enum class Layout {
    same,        // the same rows and columns
    transposed,  // GPT-2's Conv1D: dtr's [out, in] stored as [in, out]
    rope_rows,   // Llama's query and key: rows permuted within each head (rotate_half order)
  };
  std::string hf_name;
  Layout layout = Layout::same;
  // Where dtr's tensor starts along the checkpoint dim that holds dtr's dim 0
  // (GPT-2's fused c_attn holds query, key and value one after the other).
  int64_t offset = 0;
  Shape hf_shape;        // the whole checkpoint tensor's shape
  int64_t head_dim = 0;  // rope_rows
};

// dtr parameter name -> its source. `gpt2_prefix` is the prefix of GPT-2 names in
// the file: "transformer." (GPT2LMHeadModel) or "" (older GPT2Model checkpoints).
std::map<std::string, HfSource> hf_sources(const nn::TransformerConfig& config, const std::string& gpt2_prefix);

// The box of the checkpoint tensor to read for `box` of the dtr tensor (for
// rope_rows, widened to whole heads).
Box hf_box_of(const HfSource& source, const Box& box);
// The dtr tensor's `box`, from `read` (the checkpoint tensor's hf_box_of(box)).
Tensor dtr_part_from_hf(const HfSource& source, const Box& box, const Tensor& read);
// One whole dtr tensor in the checkpoint's layout (its part of a fused tensor).
Tensor hf_part_from_dtr(const HfSource& source, const Tensor& full);

}  // namespace dtr::checkpoint
