// safetensors files (the format Hugging Face and most of the ecosystem read):
// export a whole model, import a pretrained file into a plain or sharded model,
// and the streaming reader and writer underneath.
//
// Layout: an 8-byte little-endian header length N, a JSON header of N bytes
//   {"<name>": {"dtype": "F32", "shape": [8, 4], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<string>", ...}}   (optional)
// padded with spaces to a multiple of 8, then the raw little-endian data; the
// offsets are relative to the end of the header, and the tensors (taken in
// offset order) cover the data back to back with no gap. dtypes: F32, F64,
// BF16, F16, I32, I64, U8. Names are dtr's dotted fqns ("layers.0.attn.wq.weight"),
// which are PyTorch's names for the same module tree.
//
//   save_safetensors(model, "model.safetensors", {{"step", "500"}});  // every rank
//   load_safetensors(model, "model.safetensors");                     // every rank
//
// save_safetensors: collective; gathers one parameter at a time (like
// get_model_state_dict with cpu_offload + rank0_only) and rank 0 streams it into
// <path>.tmp, fsyncs and renames it to <path>. A failure on rank 0 is the same
// dtr::Error on every rank (no rank waits in a later collective).
// load_safetensors: every rank reads the header and then, for each parameter,
// only its own rows: the box its DTensorSpec gives (local offset and shape; the
// whole tensor for a plain parameter), read with pread. Everything is checked
// (names, shapes; dtypes are converted to the parameter's when they differ) and
// staged before any parameter changes; collective at the end (agreement over
// the world), so a failure on any rank loads nothing anywhere.
#pragma once

#include "dtr/checkpoint/box.h"
#include "dtr/nn/module.h"
#include "dtr/tensor/tensor.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dtr::checkpoint {

inline constexpr const char* kSafetensorsMetadataKey = "__metadata__";

std::string safetensors_dtype(DType dtype);  // "F32", "BF16", ...
// Inverse; errors name `context` (file and tensor) and the unsupported name.
DType parse_safetensors_dtype(const std::string& name, const std::string& context);

struct SafetensorsTensor {
  DType dtype = DType::f32;
  Shape shape;
  int64_t begin = 0;  // byte offsets relative to the start of the data
  int64_t end = 0;
};

struct SafetensorsHeader {
  int64_t data_start = 0;  // 8 + header length
  int64_t data_bytes = 0;  // bytes after the header
  std::map<std::string, SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Reads and validates the header: the length fits the file, the JSON parses,
// every entry has a supported dtype, a shape and offsets whose length matches
// the shape, and the entries cover the data contiguously. Errors name the file
// (and the tensor).
SafetensorsHeader read_safetensors_header(const std::filesystem::path& path);

// The elements of tensor `name` inside `box` (global offset and shape), as a
// contiguous CPU tensor of the file's dtype; reads only those bytes (pread).
Tensor read_safetensors_box(const std::filesystem::path& path, const SafetensorsHeader& header,
                            const std::string& name, const Box& box);
// The whole tensor.
Tensor read_safetensors_tensor(const std::filesystem::path& path, const SafetensorsHeader& header,
                               const std::string& name);

// Writes a safetensors file one tensor at a time: the header (every name, dtype
// and shape) is written first, then write() takes the tensors in the order they
// were declared. finish() checks that every tensor came, fsyncs and closes.
// Writes `path` directly (save_safetensors adds the tmp + rename).
class SafetensorsWriter {
 public:
  struct Entry {
    std::string name;
    DType dtype = DType::f32;
    Shape shape;
  };
  SafetensorsWriter(std::filesystem::path path, std::vector<Entry> entries,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // The next declared tensor, by name; its dtype and shape must match (any device).
  void write(const std::string& name, const Tensor& value);
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Parameters and buffers by fqn. See the header comment.
void save_safetensors(nn::Module& model, const std::filesystem::path& path,
                      const std::map<std::string, std::string>& metadata = {});
// strict: every parameter and buffer is in the file and the file has no other tensor.
void load_safetensors(nn::Module& model, const std::filesystem::path& path, bool strict = true);

}  // namespace dtr::checkpoint
