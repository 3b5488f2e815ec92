// Fuzz target: a safetensors file (its 8-byte length, JSON header and data), as
// read_safetensors_header and read_safetensors_tensor read it.
#include "fuzz_target.h"

#include "dtr/checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const dtr::fuzz::ScratchFile file("input.safetensors");
  file.write(data, size);
  dtr::fuzz::expect_clean_refusal([&] {
    const auto header = dtr::checkpoint::read_safetensors_header(file.path());
    for (const auto& [name, entry] : header.tensors) {
      dtr::checkpoint::read_safetensors_tensor(file.path(), header, name);
    }
  });
  return 0;
}
