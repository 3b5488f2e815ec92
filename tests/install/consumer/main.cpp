// Uses the installed dtr: builds a tensor and checks a value computed by hand,
// and reaches the checkpoint code (its JSON metadata header and the xxhash
// library the package config links).
#include <dtr/checkpoint/checksum.h>
#include <dtr/checkpoint/metadata.h>
#include <dtr/dtr.h>

#include <cstdio>

int main() {
  dtr::Tensor t = dtr::arange(6).view({2, 3}).t().contiguous();  // [[0,3],[1,4],[2,5]]
  std::vector<float> v = t.to_vector<float>();
  bool ok = v == std::vector<float>{0, 3, 1, 4, 2, 5};
  // XXH3-64 of no bytes (a published test vector).
  ok = ok && dtr::checkpoint::checksum_hex(dtr::checkpoint::xxh3_64("", 0)) == "2d06800538d394c2";
  dtr::checkpoint::Metadata m;
  ok = ok && dtr::checkpoint::to_json(m).at("format") == "dtr-checkpoint";
  std::printf("consumer: %s\n", ok ? "ok" : "wrong values");
  return ok ? 0 : 1;
}
