// dtr_trace_check FILE RANK [CATEGORY/NAME ...]: validates one rank's trace file
// written by the step profiler (tests/support/trace_check.h: valid JSON, pid =
// RANK, nested complete spans, matched async pairs) and requires at least one
// complete span of each CATEGORY/NAME given. Prints the span counts; exit code 0
// when valid, 1 otherwise. Used by the dtr-train profiling tests.
#include "trace_check.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: dtr_trace_check FILE RANK [CATEGORY/NAME ...]\n");
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::fprintf(stderr, "dtr_trace_check: cannot open %s\n", argv[1]);
    return 1;
  }
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtr_trace_check: %s is not valid JSON: %s\n", argv[1], e.what());
    return 1;
  }
  const dtr::testing::TraceCheck r = dtr::testing::check_trace(doc, std::atoi(argv[2]));
  bool ok = r.errors.empty();
  for (const auto& e : r.errors) std::fprintf(stderr, "dtr_trace_check: %s: %s\n", argv[1], e.c_str());
  for (int i = 3; i < argc; ++i) {
    const std::string want = argv[i];
    const auto slash = want.find('/');
    if (slash == std::string::npos || r.count(want.substr(0, slash), want.substr(slash + 1)) == 0) {
      std::fprintf(stderr, "dtr_trace_check: %s: no complete span %s\n", argv[1], want.c_str());
      ok = false;
    }
  }
  std::printf("%s: %lld complete spans, %lld async pairs\n", argv[1], static_cast<long long>(r.complete),
              static_cast<long long>(r.async_pairs));
  for (const auto& [key, n] : r.counts) {
    std::printf("  %-12s %-44s %lld\n", key.first.c_str(), key.second.c_str(), static_cast<long long>(n));
  }
  return ok ? 0 : 1;
}
