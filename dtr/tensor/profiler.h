// The step profiler: an opt-in recorder of timed spans (module forward and
// backward, collectives' issue and wait, FSDP copy-in/copy-out, the optimizer
// step, data loading) written as Chrome trace-event JSON, one file per rank, that
// opens in Perfetto (ui.perfetto.dev) or chrome://tracing, plus a text table of the
// spans with the largest total time.
//
// Why tensor/: mesh/ (collectives), nn/ (modules, optimizers), fsdp/, dtr-train/
// and the benches all record into it, and tensor/ lies below every layer that
// does (kernels/ is the math only). The recorder itself knows nothing of
// tensors, ranks or communication: distributed init tells it the rank
// (set_rank), as it does for the log lines.
//
// Turning it on:
//   - DTR_PROFILE=trace.json in the environment (read once, at program start):
//     records from the start; distributed::finalize() (or the end of the process
//     when finalize never runs) stops it, writes trace.rank<R>.json and rank 0
//     prints the top-spans table to stdout;
//   - programmatically: profiler::start({.path = "trace.json"}) ... profiler::stop();
//   - dtr-train --profile trace.json.
// The path gets the rank inserted before its extension ("trace.json" ->
// "trace.rank0.json"), or in place of "{rank}" when it has one. An empty path
// records without writing a file (events(), summary_table() still work).
//
// Recording (the hot path):
//   {
//     DTR_PROFILE_SCOPE("optim", "step");          // a span for this scope
//     ...
//   }
//   profiler::Span s("comm", "all_gather"); s.arg("bytes", n); ... s.end();
// Off: one relaxed atomic load per span and nothing else (no clock read, no
// allocation). On: steady_clock reads, events appended to a buffer owned by the
// calling thread (no lock; a new 8192-event chunk is allocated every 8192
// events); the only lock is taken once per thread, at its first event. Names and
// categories must outlive the profiler: string literals, or intern() for names
// made at run time (module paths).
//
// Event kinds: complete spans (Chrome "X" events, pid = rank, tid = a small
// number per thread, in order of first use; each thread also gets a thread_name
// record) and in-flight intervals of collectives (async "b"/"e" pairs, category
// "comm_inflight", from the issue to the return of wait(): an upper bound of
// the time the collective was in flight, drawn on their own tracks so that the
// overlap with compute is visible). Timestamps are steady_clock microseconds,
// the same clock on every rank of a node, so per-rank files line up when opened
// together.
//
// start() and stop() are meant to be called while no other thread records (e.g.
// between steps); stop() sees every event a thread finished before it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtr::profiler {

namespace detail {
extern std::atomic<bool> g_enabled;
}  // namespace detail

// Whether spans are being recorded (a relaxed load: the hot-path check).
inline bool enabled() noexcept { return detail::g_enabled.load(std::memory_order_relaxed); }

// steady_clock nanoseconds (the timestamps of every event).
inline int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline constexpr int kMaxArgs = 3;

// Integer arguments of an event ("bytes", "seq"); a null name ends the list.
struct Args {
  const char* names[kMaxArgs] = {};
  int64_t values[kMaxArgs] = {};
  const char* str_name = nullptr;  // one string argument ("group": "world"), interned or literal
  const char* str_value = nullptr;
};

// Appends one complete span [start_ns, end_ns] of the calling thread. Dropped
// when the profiler is off. category and name: literals or intern()ed.
void record(const char* category, const char* name, int64_t start_ns, int64_t end_ns, const Args& args = {});
// Appends an in-flight interval (drawn as an async track, see the header comment).
void record_async(const char* category, const char* name, int64_t start_ns, int64_t end_ns, const Args& args = {});

// A copy of `s` that lives as long as the process (the same pointer for equal
// strings). Takes a lock: call it once per name, not per event.
const char* intern(std::string_view s);

// RAII span: records [construction, end() or destruction] when the profiler was
// on at construction.
class Span {
 public:
  // Off: one relaxed load and a few plain stores (no clock read). The fields are
  // set either way so that no compiler sees a read of an uninitialised member.
  Span(const char* category, const char* name) noexcept
      : active_(enabled()), num_args_(0), category_(category), name_(name), start_(0),
        str_name_(nullptr), str_value_(nullptr) {
    if (active_) start_ = now_ns();
  }
  ~Span() { end(); }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

  bool active() const noexcept { return active_; }
  const char* name() const noexcept { return active_ ? name_ : nullptr; }
  // Adds an integer argument (at most kMaxArgs; later ones are ignored).
  Span& arg(const char* key, int64_t value) noexcept {
    if (active_ && num_args_ < kMaxArgs) {
      arg_names_[num_args_] = key;
      arg_values_[num_args_++] = value;
    }
    return *this;
  }
  Span& str_arg(const char* key, const char* value) noexcept {
    if (active_) {
      str_name_ = key;
      str_value_ = value;
    }
    return *this;
  }
  // Records the span now (once; later calls and the destructor do nothing).
  void end() noexcept {
    if (active_) {
      active_ = false;
      finish();
    }
  }

 private:
  void finish() noexcept {
    Args args;
    for (int i = 0; i < num_args_; ++i) {
      args.names[i] = arg_names_[i];
      args.values[i] = arg_values_[i];
    }
    args.str_name = str_name_;
    args.str_value = str_value_;
    record(category_, name_, start_, now_ns(), args);
  }

  bool active_;
  int num_args_;
  const char* category_;
  const char* name_;
  int64_t start_;
  const char* arg_names_[kMaxArgs];
  int64_t arg_values_[kMaxArgs];
  const char* str_name_;
  const char* str_value_;
};

#define DTR_PROFILE_CONCAT_INNER_(a, b) a##b
#define DTR_PROFILE_CONCAT_(a, b) DTR_PROFILE_CONCAT_INNER_(a, b)
// A span named `name` (a literal) in `category` covering the rest of the scope.
#define DTR_PROFILE_SCOPE(category, name) \
  ::dtr::profiler::Span DTR_PROFILE_CONCAT_(dtr_profile_span_, __LINE__)((category), (name))

// --- control ---

struct Options {
  // Where stop() writes this rank's trace (the rank inserted, see above); empty:
  // keep the events in memory only.
  std::string path{};
  // stop() prints the top-spans table to stdout on rank 0.
  bool print_summary = true;
  int summary_rows = 25;
};

// Clears earlier events and starts recording. Starting while running restarts.
void start(Options options = {});
// Stops recording; writes the trace file when a path was given and prints the
// table (see Options). Returns the file written ("" if none). Events stay
// available (events(), summary_table()) until the next start() or clear().
// Does nothing (returns "") when not running.
std::string stop();
// What DTR_PROFILE started and distributed::finalize() ends: stop() if running.
void finalize();
bool running();
void clear();

// The rank written as pid and inserted into the file name (set by distributed
// init; before that: OMPI_COMM_WORLD_RANK / PMI_RANK, else 0).
void set_rank(int rank);
int rank();
// Names the calling thread in the trace ("main", "mpi progress").
void set_thread_name(std::string_view name);
// "trace.json" -> "trace.rank3.json"; "out/{rank}/t.json" -> "out/3/t.json";
// "trace" -> "trace.rank3.json".
std::string path_for_rank(const std::string& path, int rank);

// --- reading what was recorded (after stop(), or while no thread records) ---

struct Event {
  std::string category, name;
  int tid = 0;
  int64_t start_ns = 0, end_ns = 0;
  bool async = false;  // an in-flight interval
  std::vector<std::pair<std::string, int64_t>> args;
  std::string str_arg_name, str_arg_value;
  double duration_ms() const { return static_cast<double>(end_ns - start_ns) / 1e6; }
};

// Every recorded event, per thread in recording order, threads in tid order.
std::vector<Event> events();
size_t event_count();
// Events a full buffer could not keep (more than 8M on one thread).
int64_t dropped_events();
// Nanoseconds from start() to stop() (or to now while running).
int64_t wall_ns();

// The trace as Chrome trace-event JSON text ({"traceEvents": [...], ...}).
std::string trace_json();

struct SpanStat {
  std::string category, name;
  int64_t count = 0;
  double total_ms = 0, mean_ms = 0, max_ms = 0;
  double percent_of_wall = 0;  // total / wall_ns(); nested spans are each counted in full
};
// Complete spans (not the in-flight intervals) grouped by (category, name),
// largest total first; at most `rows` (0: all).
std::vector<SpanStat> top_spans(int rows = 0);
// top_spans as a text table with a title line giving the rank and the wall time.
std::string summary_table(int rows = 25);

}  // namespace dtr::profiler
