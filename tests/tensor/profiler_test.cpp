// The step profiler's recorder (dtr/tensor/profiler.h) without communication: off it
// records nothing and writes nothing; on, spans from two threads get their own
// tids, carry their arguments, nest, and come out as valid Chrome trace JSON
// (checked by tests/support/trace_check.h); the per-rank file name; the top-spans
// table's counts, totals and percentages.
#include "dtr/tensor/profiler.h"

#include "tests/support/trace_check.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <unistd.h>

using namespace dtr;
namespace fs = std::filesystem;

namespace {

bool env_profiling() {
  if (std::getenv("DTR_PROFILE") == nullptr) return false;
  WARN("DTR_PROFILE is set: these tests start and stop the profiler themselves; skipped");
  return true;
}

void busy_for(std::chrono::microseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

}  // namespace

TEST_CASE("profiler path_for_rank inserts the rank before the extension or at {rank}") {
  CHECK(profiler::path_for_rank("trace.json", 3) == "trace.rank3.json");
  CHECK(profiler::path_for_rank("out/run1/trace.json", 0) == "out/run1/trace.rank0.json");
  CHECK(profiler::path_for_rank("out/{rank}/t.json", 12) == "out/12/t.json");
  CHECK(profiler::path_for_rank("trace", 2) == "trace.rank2.json");
}

TEST_CASE("profiler off records no span, event or file") {
  if (env_profiling()) return;
  REQUIRE_FALSE(profiler::running());
  profiler::clear();
  REQUIRE_FALSE(profiler::enabled());
  {
    DTR_PROFILE_SCOPE("test", "scoped");
    profiler::Span s("test", "explicit");
    CHECK_FALSE(s.active());
    s.arg("bytes", 10);
    s.end();
  }
  profiler::record("test", "direct", 1, 2);
  profiler::record_async("test", "direct async", 1, 2);
  CHECK(profiler::event_count() == 0);
  CHECK(profiler::events().empty());
  CHECK(profiler::stop().empty());
}

TEST_CASE("profiler spans from two threads nest, carry arguments and form valid trace JSON") {
  if (env_profiling()) return;
  const fs::path dir = fs::temp_directory_path() / fmt::format("dtr_profiler_unit_{}", ::getpid());
  fs::remove_all(dir);
  profiler::start({.path = (dir / "trace.json").string(), .print_summary = false});
  REQUIRE(profiler::enabled());
  {
    DTR_PROFILE_SCOPE("test", "outer");
    for (int i = 0; i < 3; ++i) {
      profiler::Span inner("test", "inner");
      inner.arg("i", i).arg("bytes", 100 * i).str_arg("group", profiler::intern("world"));
      busy_for(std::chrono::microseconds(200));
    }
  }
  std::thread worker([] {
    profiler::set_thread_name("worker");
    DTR_PROFILE_SCOPE("test", "worker span");
    busy_for(std::chrono::microseconds(100));
  });
  worker.join();
  const int64_t t0 = profiler::now_ns();
  profiler::record_async("comm_inflight", "all_gather", t0, t0 + 5000);
  const std::string written = profiler::stop();
  REQUIRE_FALSE(profiler::enabled());
  CHECK(written == (dir / "trace.rank0.json").string());  // rank 0: no distributed init in unit tests

  const std::vector<profiler::Event> events = profiler::events();
  REQUIRE(events.size() == 6);
  int main_tid = -1, worker_tid = -1;
  int inner_seen = 0;
  for (const auto& e : events) {
    if (e.name == "outer") main_tid = e.tid;
    if (e.name == "worker span") worker_tid = e.tid;
    if (e.name == "inner") {
      REQUIRE(e.args.size() == 2);
      CHECK(e.args[0] == std::pair<std::string, int64_t>{"i", inner_seen});
      CHECK(e.args[1] == std::pair<std::string, int64_t>{"bytes", 100 * inner_seen});
      CHECK(e.str_arg_value == "world");
      CHECK(e.duration_ms() >= 0.2);
      ++inner_seen;
    }
  }
  CHECK(inner_seen == 3);
  CHECK(main_tid > 0);
  CHECK(worker_tid > 0);
  CHECK(main_tid != worker_tid);

  std::ifstream in(written);
  nlohmann::json doc;
  REQUIRE_NOTHROW(doc = nlohmann::json::parse(in));
  const testing::TraceCheck trace = testing::check_trace(doc, 0);
  for (const auto& e : trace.errors) UNSCOPED_INFO(e);
  REQUIRE(trace.errors.empty());
  CHECK(trace.complete == 5);
  CHECK(trace.async_pairs == 1);
  CHECK(trace.count("test", "inner") == 3);
  CHECK(trace.count("test", "inner", "world") == 3);
  bool named_worker = false;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == "worker") {
      named_worker = e["tid"] == worker_tid;
    }
  }
  CHECK(named_worker);

  // The table: "inner" 3 times, its total the sum of the three, below the outer span's.
  const auto rows = profiler::top_spans();
  auto find = [&](const std::string& name) {
    return *std::find_if(rows.begin(), rows.end(), [&](const profiler::SpanStat& s) { return s.name == name; });
  };
  const profiler::SpanStat inner = find("inner"), outer = find("outer");
  CHECK(inner.count == 3);
  CHECK(inner.total_ms >= 0.6);
  CHECK(inner.mean_ms == Approx(inner.total_ms / 3));
  CHECK(outer.total_ms >= inner.total_ms);
  CHECK(outer.percent_of_wall <= 100.0);
  CHECK(rows.front().name == "outer");  // the largest total first
  CHECK(std::none_of(rows.begin(), rows.end(), [](const profiler::SpanStat& s) { return s.name == "all_gather"; }));
  const std::string table = profiler::summary_table();
  CHECK(table.find("inner") != std::string::npos);
  CHECK(table.find("% wall") != std::string::npos);

  profiler::clear();
  CHECK(profiler::event_count() == 0);
  fs::remove_all(dir);
}
