// The step profiler's cost per span (dtr/tensor/profiler.h): nanoseconds for one
// DTR_PROFILE_SCOPE with the profiler off (one relaxed atomic load) and on (two
// steady_clock reads and an append to the thread's buffer), over --spans spans.
// Multiply by the spans a step records (the trace's event count / steps) for the
// cost per step; bench/fsdp_step_bench with and without DTR_PROFILE measures it
// end to end.
//   build/release/bench/dtr_profiler_bench [--spans 200000]
#include "dtr/tensor/profiler.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdint>

namespace {

// Keeps the loop from being optimised away.
volatile int64_t g_sink = 0;

double ns_per_span(int64_t spans) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < spans; ++i) {
    DTR_PROFILE_SCOPE("bench", "span");
    g_sink = g_sink + 1;
  }
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(spans);
}

double ns_per_iteration(int64_t n) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) g_sink = g_sink + 1;
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(n);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t spans = 200000;
  CLI::App app{"dtr_profiler_bench: nanoseconds per profiler span, off and on"};
  app.add_option("--spans", spans, "spans per measurement");
  CLI11_PARSE(app, argc, argv);
  dtr::profiler::finalize();  // DTR_PROFILE may have started it: measure from a known state
  const double loop = ns_per_iteration(spans);
  const double off = ns_per_span(spans);
  dtr::profiler::start({.print_summary = false});
  const double on = ns_per_span(spans);
  dtr::profiler::stop();
  fmt::print("{} spans: empty loop {:.2f} ns/iteration; span off {:.2f} ns, on {:.2f} ns (recorded {} events)\n",
             spans, loop, off, on, dtr::profiler::event_count());
  dtr::profiler::clear();
  return 0;
}
