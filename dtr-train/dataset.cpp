#include "dataset.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace dtr::train {

struct TokenDataset::Mapping {
  void* address = nullptr;
  size_t length = 0;
  ~Mapping() {
    if (address != nullptr && length > 0) munmap(address, length);
  }
};

namespace {

[[noreturn]] void fail(const std::string& message) { throw std::runtime_error(message); }

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

int32_t read_i32(const unsigned char* p) {
  int32_t v = 0;
  std::memcpy(&v, p, sizeof v);  // little-endian hosts only (x86-64, aarch64)
  return v;
}

}  // namespace

TokenDataset TokenDataset::from_memory(const void* data, int64_t size_bytes, TokenFormat format, std::string name) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  TokenDataset ds;
  ds.name_ = std::move(name);
  ds.format_ = format;
  if (format == TokenFormat::bytes) {
    ds.tokens_ = bytes;
    ds.end_ = size_bytes;
    return ds;
  }
  if (size_bytes < kLlmcHeaderBytes) {
    fail(fmt::format("{}: truncated llm.c shard: {} bytes, shorter than the {}-byte header", ds.name_, size_bytes,
                     kLlmcHeaderBytes));
  }
  const int32_t magic = read_i32(bytes), version = read_i32(bytes + 4), count = read_i32(bytes + 8);
  if (magic != kLlmcMagic) {
    fail(fmt::format("{}: not an llm.c token shard: magic number is {}, expected {}", ds.name_, magic, kLlmcMagic));
  }
  if (version != kLlmcVersion) {
    fail(fmt::format("{}: llm.c shard version {}, expected {} (uint16 GPT-2 tokens)", ds.name_, version,
                     kLlmcVersion));
  }
  if (count < 0) fail(fmt::format("{}: llm.c shard header has a negative token count ({})", ds.name_, count));
  const int64_t need = kLlmcHeaderBytes + 2 * static_cast<int64_t>(count);
  if (size_bytes < need) {
    fail(fmt::format("{}: truncated llm.c shard: the header says {} tokens ({} bytes), the file has {} bytes", ds.name_,
                     count, need, size_bytes));
  }
  ds.tokens_ = bytes + kLlmcHeaderBytes;
  ds.end_ = count;
  // Every id once, here: a bad one found mid-training (or in the last evaluation)
  // would cost the run; uint16 holds ids the GPT-2 vocabulary does not.
  for (int64_t i = 0; i < count; ++i) {
    uint16_t id = 0;
    std::memcpy(&id, ds.tokens_ + 2 * i, sizeof id);
    if (id >= kGpt2VocabSize) {
      fail(fmt::format("{}: token {} (byte offset {}) is {}, outside the GPT-2 vocabulary [0, {})", ds.name_, i,
                       kLlmcHeaderBytes + 2 * i, id, kGpt2VocabSize));
    }
  }
  return ds;
}

TokenDataset TokenDataset::open(const std::string& path, DataFormat format) {
  TokenFormat fmt_kind = TokenFormat::bytes;
  switch (format) {
    case DataFormat::by_extension:
      if (ends_with(path, ".bin")) fmt_kind = TokenFormat::llmc;
      break;
    case DataFormat::bytes:
      break;
    case DataFormat::llmc:
      fmt_kind = TokenFormat::llmc;
      break;
  }
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(fmt::format("{}: not a regular file", path));
  }
  auto mapping = std::make_shared<Mapping>();
  mapping->length = static_cast<size_t>(st.st_size);
  if (mapping->length > 0) {
    mapping->address = mmap(nullptr, mapping->length, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping->address == MAP_FAILED) {
      mapping->address = nullptr;
      ::close(fd);
      fail(fmt::format("{}: mmap failed: {}", path, std::strerror(errno)));
    }
  }
  ::close(fd);
  TokenDataset ds = from_memory(mapping->address, static_cast<int64_t>(mapping->length), fmt_kind, path);
  ds.mapping_ = std::move(mapping);
  return ds;
}

int64_t TokenDataset::token(int64_t i) const {
  if (i < 0 || i >= size()) fail(fmt::format("{}: token index {} out of range [0, {})", name_, i, size()));
  const int64_t j = begin_ + i;
  if (format_ == TokenFormat::bytes) return tokens_[j];
  uint16_t v = 0;
  std::memcpy(&v, tokens_ + 2 * j, sizeof v);
  return v;
}

TokenDataset TokenDataset::slice(int64_t begin, int64_t end) const {
  if (begin < 0 || end < begin || end > size()) {
    fail(fmt::format("{}: slice [{}, {}) out of range [0, {})", name_, begin, end, size()));
  }
  TokenDataset ds = *this;
  ds.begin_ = begin_ + begin;
  ds.end_ = begin_ + end;
  return ds;
}

std::pair<TokenDataset, TokenDataset> TokenDataset::split(double validation_fraction) const {
  if (!(validation_fraction >= 0.0 && validation_fraction < 1.0)) {
    fail(fmt::format("validation fraction must be in [0, 1), got {}", validation_fraction));
  }
  const auto n_val = static_cast<int64_t>(static_cast<double>(size()) * validation_fraction);
  return {slice(0, size() - n_val), slice(size() - n_val, size())};
}

int64_t TokenDataset::num_windows(int64_t seq_len) const {
  if (seq_len <= 0 || size() < seq_len + 1) return 0;
  return (size() - 1) / seq_len;
}

void TokenDataset::window(int64_t index, int64_t seq_len, std::vector<int64_t>& inputs,
                          std::vector<int64_t>& targets) const {
  if (index < 0 || index >= num_windows(seq_len)) {
    fail(fmt::format("{}: window {} of length {} out of range ({} windows)", name_, index, seq_len,
                     num_windows(seq_len)));
  }
  const int64_t start = index * seq_len;
  for (int64_t t = 0; t < seq_len; ++t) {
    inputs.push_back(token(start + t));
    targets.push_back(token(start + t + 1));
  }
}

void write_llmc_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = kLlmcMagic;
  header[1] = kLlmcVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  std::ofstream out(path, std::ios::binary);
  if (!out) fail(fmt::format("{}: cannot write", path));
  out.write(reinterpret_cast<const char*>(header.data()), static_cast<std::streamsize>(header.size() * 4));
  out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  if (!out) fail(fmt::format("{}: write failed", path));
}

}  // namespace dtr::train
