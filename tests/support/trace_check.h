// Validates a Chrome trace-event JSON document as the step profiler
// (dtr/tensor/profiler.h) writes it, independently of the profiler's own code: an
// object with a "traceEvents" array; every event has a known phase ("X", "b",
// "e", "M"), the expected pid and an integer tid; complete spans have a name, a
// category, ts >= 0 and dur >= 0, and on each thread they nest (any two are
// disjoint or one contains the other); every async begin has exactly one end
// with the same id, name and category, no earlier than it. Counts complete
// spans by (category, name) and by (category, name, group argument) for the
// tests' expectations.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace dtr::testing {

struct TraceCheck {
  std::vector<std::string> errors;  // empty: valid
  int64_t complete = 0, async_pairs = 0, metadata = 0;
  std::map<std::pair<std::string, std::string>, int64_t> counts;  // (cat, name) -> complete spans
  std::map<std::tuple<std::string, std::string, std::string>, int64_t> counts_by_group;  // + args.group
  std::map<std::pair<std::string, std::string>, int64_t> async_counts;
  int64_t count(const std::string& cat, const std::string& name) const {
    auto it = counts.find({cat, name});
    return it == counts.end() ? 0 : it->second;
  }
  int64_t count(const std::string& cat, const std::string& name, const std::string& group) const {
    auto it = counts_by_group.find({cat, name, group});
    return it == counts_by_group.end() ? 0 : it->second;
  }
};

inline TraceCheck check_trace(const nlohmann::json& doc, int expected_pid) {
  TraceCheck r;
  auto fail = [&](std::string message) {
    if (r.errors.size() < 20) r.errors.push_back(std::move(message));
  };
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    fail("not an object with a traceEvents array");
    return r;
  }
  struct Span {
    double ts, end;
    std::string name;
  };
  std::map<int64_t, std::vector<Span>> by_tid;
  struct Open {
    double ts;
    std::string name, cat;
    bool ended = false;
  };
  std::map<std::string, Open> async;
  for (const auto& e : doc["traceEvents"]) {
    const std::string where = e.dump().substr(0, 200);
    if (!e.is_object() || !e.contains("ph") || !e["ph"].is_string()) {
      fail("event without a phase: " + where);
      continue;
    }
    const std::string ph = e["ph"];
    if (!e.contains("pid") || !e["pid"].is_number_integer() || e["pid"].get<int64_t>() != expected_pid) {
      fail("pid is not the rank " + std::to_string(expected_pid) + ": " + where);
    }
    if (!e.contains("tid") || !e["tid"].is_number_integer()) fail("no integer tid: " + where);
    if (ph == "M") {
      ++r.metadata;
      continue;
    }
    if (!e.contains("name") || !e["name"].is_string() || !e.contains("cat") || !e["cat"].is_string() ||
        !e.contains("ts") || !e["ts"].is_number()) {
      fail("event without name, cat or ts: " + where);
      continue;
    }
    const std::string name = e["name"], cat = e["cat"];
    const double ts = e["ts"];
    if (ts < 0) fail("negative ts: " + where);
    if (ph == "X") {
      if (!e.contains("dur") || !e["dur"].is_number() || e["dur"].get<double>() < 0) {
        fail("complete event without a non-negative dur: " + where);
        continue;
      }
      ++r.complete;
      ++r.counts[{cat, name}];
      if (e.contains("args") && e["args"].contains("group") && e["args"]["group"].is_string()) {
        ++r.counts_by_group[{cat, name, e["args"]["group"].get<std::string>()}];
      }
      by_tid[e["tid"].get<int64_t>()].push_back({ts, ts + e["dur"].get<double>(), cat + "/" + name});
    } else if (ph == "b" || ph == "e") {
      if (!e.contains("id")) {
        fail("async event without an id: " + where);
        continue;
      }
      const std::string id = e["id"].dump();
      if (ph == "b") {
        if (async.count(id) != 0) fail("async id begun twice: " + where);
        async[id] = {ts, name, cat};
      } else {
        auto it = async.find(id);
        if (it == async.end() || it->second.ended) {
          fail("async end without a begin: " + where);
        } else {
          if (it->second.name != name || it->second.cat != cat) fail("async end names another span: " + where);
          if (ts < it->second.ts) fail("async end before its begin: " + where);
          it->second.ended = true;
          ++r.async_pairs;
          ++r.async_counts[{cat, name}];
        }
      }
    } else {
      fail("unexpected phase '" + ph + "': " + where);
    }
  }
  for (const auto& [id, open] : async) {
    if (!open.ended) fail("async begin without an end: " + open.cat + "/" + open.name);
  }
  // Nesting: 1 ns of slack for the decimal microseconds.
  constexpr double slack = 0.002;
  for (auto& [tid, spans] : by_tid) {
    std::stable_sort(spans.begin(), spans.end(),
                     [](const Span& a, const Span& b) { return a.ts != b.ts ? a.ts < b.ts : a.end > b.end; });
    std::vector<const Span*> stack;
    for (const Span& s : spans) {
      while (!stack.empty() && stack.back()->end <= s.ts + slack) stack.pop_back();
      if (!stack.empty() && s.end > stack.back()->end + slack) {
        fail("tid " + std::to_string(tid) + ": span " + s.name + " [" + std::to_string(s.ts) + ", " +
             std::to_string(s.end) + "] overlaps " + stack.back()->name + " [" + std::to_string(stack.back()->ts) +
             ", " + std::to_string(stack.back()->end) + "] without nesting");
      }
      stack.push_back(&s);
    }
  }
  return r;
}

}  // namespace dtr::testing
