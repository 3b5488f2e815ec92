// Fuzz target: a token file in the llm.c shard format (1024-byte header, uint16
// token ids), as dtr-train loads it, then split and cut into windows.
#include "fuzz_target.h"

#include "dataset.h"

#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using dtr::train::TokenDataset;
  dtr::fuzz::expect_clean_refusal([&] {
    const TokenDataset all =
        TokenDataset::from_memory(data, static_cast<int64_t>(size), dtr::train::TokenFormat::llmc, "fuzz input");
    const auto [train, val] = all.split(0.25);
    std::vector<int64_t> inputs, targets;
    for (const TokenDataset* part : {&train, &val}) {
      const int64_t windows = part->num_windows(4);
      if (windows > 0) part->window(windows - 1, 4, inputs, targets);
    }
  });
  return 0;
}
