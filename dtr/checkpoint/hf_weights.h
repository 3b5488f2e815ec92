// Hugging Face transformers checkpoints in and out of nn::Transformer: GPT-2
// (GPT2LMHeadModel) and Llama (LlamaForCausalLM) model directories, as
// save_pretrained writes them (config.json with model.safetensors, or sharded
// model-0000N-of-0000M.safetensors files with model.safetensors.index.json).
//
//   nn::TransformerConfig config = checkpoint::read_hf_config(dir);   // hf_config.h
//   config.device = Device::meta();
//   auto model = std::make_shared<nn::Transformer>(config);
//   ... fully_shard(...), model->to_empty(Device::cpu()) ...
//   checkpoint::load_hf_pretrained(*model, dir);      // each rank reads only its rows
//   ... train ...
//   checkpoint::save_hf_pretrained(*model, "out/");   // from_pretrained("out/") loads it
//
// The layouts differ from dtr's in three ways, undone on load and redone on save:
// GPT-2's projections are Conv1D weights, stored [in, out] (transposed); its
// query, key and value projections are one fused c_attn tensor; and Llama's query
// and key rows are permuted within each head, because transformers rotates the
// two halves of a head (rotate_half) where dtr rotates interleaved pairs
// (dtr/tensor/ops/rope.h). Tied heads: the head is the token embedding, which is
// all the file needs (a tied model's file may carry lm_head.weight too; it is
// ignored). A directory with both model.safetensors and an index is read from
// model.safetensors, as transformers does; saving removes an earlier save's
// sharded files and index.
#pragma once

#include "dtr/nn/transformer.h"

#include <filesystem>

namespace dtr::checkpoint {

// Loads the weights of the model directory `dir` into `model`, whose config must
// be the directory's (read_hf_config; an error lists the keys that differ). Every
// tensor of the file is used (GPT-2's attention-mask buffers and Llama's rotary
// inv_freq excepted): a file with tensors the model lacks, or lacking some, is an
// error naming them. Under fully_shard each rank reads only the rows of its shards.
// Collective (all ranks agree before any parameter changes): a failure on any rank
// loads nothing anywhere.
void load_hf_pretrained(nn::Transformer& model, const std::filesystem::path& dir);

// Writes <dir>/config.json and <dir>/model.safetensors in transformers' names and
// layouts (the parameters' dtype). Collective: each tensor is gathered and rank 0
// writes, each file to a temporary name renamed into place.
void save_hf_pretrained(nn::Transformer& model, const std::filesystem::path& dir);

}  // namespace dtr::checkpoint
