#include "dtr/checkpoint/safetensors.h"

#include "dtr/base/error.h"
#include "dtr/checkpoint/agreement.h"
#include "dtr/checkpoint/file_io.h"
#include "dtr/checkpoint/model_tensors.h"
#include "dtr/mesh/distributed.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"

#include <algorithm>
#include <bit>
#include <nlohmann/json.hpp>
#include <set>

namespace dtr::checkpoint {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int64_t kMaxHeaderBytes = int64_t{100} << 20;  // as the reference implementation

}  // namespace

std::string safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
  }
  DTR_FAIL("safetensors: unknown dtype {}", static_cast<int>(dtype));
}

DType parse_safetensors_dtype(const std::string& name, const std::string& context) {
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8}) {
    if (safetensors_dtype(d) == name) return d;
  }
  DTR_FAIL("{}: unsupported safetensors dtype \"{}\" (expected one of F32, F64, BF16, F16, I32, I64, U8)", context,
           name);
}

SafetensorsHeader read_safetensors_header(const fs::path& path) {
  const std::string file = path.string();
  FileReader reader(path);
  const int64_t size = reader.size();
  DTR_CHECK(size >= 8, "safetensors file {}: {} bytes, expected at least the 8-byte header length", file, size);
  uint64_t n = 0;
  reader.read_at(&n, 8, 0);
  DTR_CHECK(n <= static_cast<uint64_t>(kMaxHeaderBytes) && static_cast<int64_t>(n) <= size - 8,
            "safetensors file {}: header length {} does not fit the file ({} bytes; at most {} allowed)", file, n,
            size, kMaxHeaderBytes);
  std::string text(static_cast<size_t>(n), '\0');
  reader.read_at(text.data(), text.size(), 8);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    DTR_FAIL("safetensors file {}: the header is not valid JSON: {}", file, e.what());
  }
  DTR_CHECK(j.is_object(), "safetensors file {}: the header is not a JSON object", file);

  SafetensorsHeader h;
  h.data_start = 8 + static_cast<int64_t>(n);
  h.data_bytes = size - h.data_start;
  for (const auto& [name, v] : j.items()) {
    if (name == kSafetensorsMetadataKey) {
      DTR_CHECK(v.is_object(), "safetensors file {}: __metadata__ is not an object", file);
      for (const auto& [k, s] : v.items()) {
        DTR_CHECK(s.is_string(), "safetensors file {}: __metadata__[\"{}\"] is not a string", file, k);
        h.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    const std::string ctx = fmt::format("safetensors file {}, tensor '{}'", file, name);
    try {
      SafetensorsTensor t;
      t.dtype = parse_safetensors_dtype(v.at("dtype").get<std::string>(), ctx);
      t.shape = v.at("shape").get<Shape>();
      const auto offsets = v.at("data_offsets").get<std::vector<int64_t>>();
      DTR_CHECK(offsets.size() == 2, "{}: data_offsets has {} entries, expected 2", ctx, offsets.size());
      t.begin = offsets[0];
      t.end = offsets[1];
      for (int64_t d : t.shape) DTR_CHECK(d >= 0, "{}: negative size in shape {}", ctx, shape_str(t.shape));
      const int64_t want = numel_of(t.shape) * static_cast<int64_t>(element_size(t.dtype));
      DTR_CHECK(t.begin >= 0 && t.end - t.begin == want,
                "{}: data_offsets [{}, {}] hold {} bytes, expected {} for {} {}", ctx, t.begin, t.end,
                t.end - t.begin, want, safetensors_dtype(t.dtype), shape_str(t.shape));
      h.tensors.emplace(name, std::move(t));
    } catch (const json::exception& e) {
      DTR_FAIL("{}: malformed entry (expected dtype, shape and data_offsets): {}", ctx, e.what());
    }
  }
  // Taken in offset order, the tensors cover [0, data_bytes) back to back.
  std::vector<std::pair<const std::string*, const SafetensorsTensor*>> order;
  for (const auto& [name, t] : h.tensors) order.emplace_back(&name, &t);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second->begin, a.second->end) < std::pair(b.second->begin, b.second->end);
  });
  int64_t at = 0;
  for (const auto& [name, t] : order) {
    DTR_CHECK(t->begin == at, "safetensors file {}, tensor '{}': data starts at {}, expected {} ({})", file, *name,
              t->begin, at, t->begin > at ? "a gap before it" : "it overlaps the previous tensor");
    at = t->end;
  }
  DTR_CHECK(at == h.data_bytes, "safetensors file {}: the tensors cover {} data bytes, the file holds {}{}", file, at,
            h.data_bytes, at > h.data_bytes ? " (truncated)" : "");
  return h;
}

Tensor read_safetensors_box(const fs::path& path, const SafetensorsHeader& header, const std::string& name,
                            const Box& box) {
  auto it = header.tensors.find(name);
  DTR_CHECK(it != header.tensors.end(), "safetensors file {}: no tensor '{}'", path.string(), name);
  const SafetensorsTensor& t = it->second;
  const Box whole{Shape(t.shape.size(), 0), t.shape};
  bool inside = box.offset.size() == t.shape.size() && box.shape.size() == t.shape.size();
  for (size_t d = 0; inside && d < t.shape.size(); ++d) {
    inside = box.offset[d] >= 0 && box.shape[d] >= 0 && box.offset[d] + box.shape[d] <= t.shape[d];
  }
  DTR_CHECK(inside, "safetensors file {}, tensor '{}': box {} lies outside the shape {}", path.string(), name,
            box.to_string(), shape_str(t.shape));
  Tensor out = empty(box.shape, {.dtype = t.dtype, .device = Device::cpu()});
  if (box.numel() == 0) return out;
  FileReader reader(path);
  const auto esize = static_cast<int64_t>(element_size(t.dtype));
  char* dst = static_cast<char*>(out.raw_data());
  for (const Run& r : copy_runs(whole, box, box)) {
    reader.read_at(dst + r.dst * esize, static_cast<size_t>(r.elements * esize),
                   header.data_start + t.begin + r.src * esize);
  }
  return out;
}

Tensor read_safetensors_tensor(const fs::path& path, const SafetensorsHeader& header, const std::string& name) {
  auto it = header.tensors.find(name);
  DTR_CHECK(it != header.tensors.end(), "safetensors file {}: no tensor '{}'", path.string(), name);
  return read_safetensors_box(path, header, name, Box{Shape(it->second.shape.size(), 0), it->second.shape});
}

struct SafetensorsWriter::Impl {
  fs::path path;
  std::vector<Entry> entries;
  size_t next = 0;
  FileWriter file;
  Impl(fs::path p, std::vector<Entry> e) : path(std::move(p)), entries(std::move(e)), file(path) {}
};

SafetensorsWriter::SafetensorsWriter(fs::path path, std::vector<Entry> entries,
                                     const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  int64_t at = 0;
  std::set<std::string> seen;
  for (const Entry& e : entries) {
    DTR_CHECK(e.name != kSafetensorsMetadataKey && seen.insert(e.name).second,
              "safetensors file {}: tensor name '{}' is reserved or repeated", path.string(), e.name);
    const int64_t bytes = numel_of(e.shape) * static_cast<int64_t>(element_size(e.dtype));
    header[e.name] = json{{"dtype", safetensors_dtype(e.dtype)}, {"shape", e.shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  if (!metadata.empty()) header[kSafetensorsMetadataKey] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data aligned to 8 bytes, as the reference writer does
  impl_ = std::make_unique<Impl>(std::move(path), std::move(entries));
  const uint64_t n = text.size();
  impl_->file.write(&n, 8);
  impl_->file.write(text.data(), text.size());
}

SafetensorsWriter::~SafetensorsWriter() = default;

void SafetensorsWriter::write(const std::string& name, const Tensor& value) {
  const std::string file = impl_->path.string();
  DTR_CHECK(impl_->next < impl_->entries.size(), "safetensors file {}: tensor '{}' written after the last one", file,
            name);
  const Entry& e = impl_->entries[impl_->next];
  DTR_CHECK(e.name == name, "safetensors file {}: expected tensor '{}' next, got '{}'", file, e.name, name);
  DTR_CHECK(value.dtype() == e.dtype && value.sizes() == e.shape, "safetensors file {}, tensor '{}': declared {} {}, got {} {}",
            file, name, dtype_name(e.dtype), shape_str(e.shape), dtype_name(value.dtype()), shape_str(value.sizes()));
  Tensor c = value.to(Device::cpu()).contiguous();
  if (c.nbytes() > 0) impl_->file.write(c.raw_data(), c.nbytes());
  ++impl_->next;
}

void SafetensorsWriter::finish() {
  DTR_CHECK(impl_->next == impl_->entries.size(), "safetensors file {}: {} of {} tensors written (next: '{}')",
            impl_->path.string(), impl_->next, impl_->entries.size(),
            impl_->next < impl_->entries.size() ? impl_->entries[impl_->next].name : "");
  impl_->file.sync_and_close();
}

void save_safetensors(nn::Module& model, const fs::path& path, const std::map<std::string, std::string>& metadata) {
  distributed::ensure_initialized("dtr::checkpoint::save_safetensors");
  autograd::NoGradGuard no_grad;
  const bool writer_rank = distributed::rank() == 0;
  const fs::path tmp = fs::path(path.string() + ".tmp");
  const auto slots = model_tensors(model);
  WriterSteps steps(writer_rank);
  std::unique_ptr<SafetensorsWriter> writer;
  steps.run([&] {
    std::vector<SafetensorsWriter::Entry> entries;
    for (const auto& t : slots) entries.push_back({t.name, t.local.dtype(), t.global_shape()});
    writer = std::make_unique<SafetensorsWriter>(tmp, std::move(entries), metadata);
  });
  for (const auto& t : slots) {
    // Every rank takes part in each gather, even after rank 0 failed.
    Tensor full = t.full();
    steps.run([&] { writer->write(t.name, full); });
  }
  steps.run([&] {
    writer->finish();
    fs::rename(tmp, path);
    fsync_directory(path.parent_path().empty() ? fs::path(".") : path.parent_path());
  });
  writer.reset();
  if (writer_rank && !steps.error().empty()) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
  }
  agree_or_throw(fmt::format("save_safetensors to {}", path.string()), steps.error());
}

void load_safetensors(nn::Module& model, const fs::path& path, bool strict) {
  distributed::ensure_initialized("dtr::checkpoint::load_safetensors");
  autograd::NoGradGuard no_grad;
  const auto slots = model_tensors(model);
  std::string error;
  std::vector<std::pair<Tensor, Tensor>> staged;  // slot, its local part
  try {
    const SafetensorsHeader header = read_safetensors_header(path);
    std::vector<std::string> missing, mismatched, unexpected;
    std::set<std::string> known;
    for (const auto& t : slots) {
      known.insert(t.name);
      auto it = header.tensors.find(t.name);
      if (it == header.tensors.end()) {
        missing.push_back(t.name);
      } else if (it->second.shape != t.global_shape()) {
        mismatched.push_back(fmt::format("'{}': the model has {} {}, the file {} {}", t.name,
                                         dtype_name(t.local.dtype()), shape_str(t.global_shape()),
                                         safetensors_dtype(it->second.dtype),
                                         shape_str(it->second.shape)));
      }
    }
    for (const auto& [name, t] : header.tensors) {
      if (!known.contains(name)) unexpected.push_back(name);
    }
    DTR_CHECK(mismatched.empty() && (!strict || (missing.empty() && unexpected.empty())),
              "load_safetensors from {}: missing tensors [{}], unexpected tensors [{}], mismatched [{}]",
              path.string(), fmt::join(missing, ", "), fmt::join(unexpected, ", "), fmt::join(mismatched, "; "));
    for (const auto& t : slots) {
      if (!header.tensors.contains(t.name)) continue;
      staged.emplace_back(t.local, read_safetensors_box(path, header, t.name, t.local_box()));
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_or_throw(fmt::format("load_safetensors from {}", path.string()), error);
  for (auto& [slot, local] : staged) slot.copy_(local.to(slot.device()));
}

}  // namespace dtr::checkpoint
