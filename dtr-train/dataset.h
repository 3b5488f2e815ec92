// TokenDataset: a read-only sequence of token ids backed by a memory-mapped file
// (or by bytes compiled into the program), in one of two formats:
//   bytes: any file, one token per byte (vocabulary 256): byte-level language modelling.
//   llmc:  the llm.c shard format: a 1024-byte header of 256 little-endian int32
//          (header[0] = magic 20240520, header[1] = version 1, header[2] = token
//          count), then that many uint16 GPT-2 token ids (vocabulary 50257).
// open() with DataFormat::by_extension (--data-format auto) picks llmc for a
// file ending in ".bin" and bytes for anything else. A wrong magic, an unknown version, or a file shorter than its
// header says are errors (dtr::Error) whose message names the file and what was
// expected and found.
//
// slice(begin, end) is a view of tokens [begin, end) sharing the mapping: the
// train/validation split takes the last fraction of the tokens for validation.
// A sample is a window of seq_len + 1 consecutive tokens: inputs are the first
// seq_len, targets the last seq_len; num_windows(seq_len) non-overlapping
// windows fit (window i starts at token i * seq_len).
#pragma once

#include "enum_names.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtr::train {

enum class TokenFormat { bytes, llmc };

// --data-format: how open() reads a file (by_extension: llmc for ".bin", else bytes).
enum class DataFormat { by_extension, bytes, llmc };
template <>
struct EnumNames<DataFormat> {
  static constexpr std::array<std::string_view, 3> names = {"auto", "bytes", "llmc"};
};

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int32_t kLlmcVersion = 1;
inline constexpr int64_t kLlmcHeaderBytes = 1024;
inline constexpr int64_t kGpt2VocabSize = 50257;

class TokenDataset {
 public:
  static TokenDataset open(const std::string& path, DataFormat format = DataFormat::by_extension);
  // Over memory the caller keeps alive (the embedded corpus); `name` is used in messages.
  static TokenDataset from_memory(const void* data, int64_t size_bytes, TokenFormat format, std::string name);

  int64_t size() const { return end_ - begin_; }  // tokens
  int64_t vocab_size() const { return format_ == TokenFormat::bytes ? 256 : kGpt2VocabSize; }
  TokenFormat format() const { return format_; }
  const std::string& name() const { return name_; }
  int64_t token(int64_t i) const;  // 0 <= i < size()

  TokenDataset slice(int64_t begin, int64_t end) const;
  // (train, validation): the validation part is the last `fraction` of the tokens.
  std::pair<TokenDataset, TokenDataset> split(double validation_fraction) const;

  int64_t num_windows(int64_t seq_len) const;
  // Appends window `index` of seq_len + 1 tokens split as inputs / targets.
  void window(int64_t index, int64_t seq_len, std::vector<int64_t>& inputs, std::vector<int64_t>& targets) const;

 private:
  struct Mapping;
  std::shared_ptr<const Mapping> mapping_;
  const unsigned char* tokens_ = nullptr;  // first token of the whole file
  TokenFormat format_ = TokenFormat::bytes;
  int64_t begin_ = 0, end_ = 0;
  std::string name_;
};

// Writes an llm.c shard (header + uint16 tokens); for tests and data preparation.
void write_llmc_shard(const std::string& path, const std::vector<uint16_t>& tokens);

}  // namespace dtr::train
