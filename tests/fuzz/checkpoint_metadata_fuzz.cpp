// Fuzz target: a checkpoint's metadata.json, as read_metadata reads it; and the
// same JSON with a valid checksum put in, so that mutations also reach the checks
// behind the checksum (fields, chunk tiling, file references).
#include "fuzz_target.h"

#include "dtr/checkpoint/metadata.h"

#include <nlohmann/json.hpp>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace ckpt = dtr::checkpoint;
  static const dtr::fuzz::ScratchFile file("metadata.json");
  file.write(data, size);
  dtr::fuzz::expect_clean_refusal([&] { ckpt::read_metadata(file.dir()); });
  dtr::fuzz::expect_clean_refusal([&] {
    nlohmann::json j = nlohmann::json::parse(data, data + size);
    if (!j.is_object()) return;
    j.erase("checksum");
    const std::string checksum = ckpt::content_checksum(j);
    j["checksum"] = checksum;
    ckpt::metadata_from_json(j, "fuzz input");
  });
  return 0;
}
