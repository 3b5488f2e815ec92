// Fuzz target: a dtr-train model JSON file (--model path), as model_config parses
// and checks it.
#include "fuzz_target.h"

#include "config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const dtr::fuzz::ScratchFile file("model.json");
  file.write(data, size);
  dtr::fuzz::expect_clean_refusal([&] { dtr::train::model_config(file.path().string(), 256); });
  return 0;
}
