#include "dtr/tensor/profiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <utility>

namespace dtr::profiler {

namespace detail {
constinit std::atomic<bool> g_enabled{false};
}  // namespace detail

namespace {

constexpr size_t kChunk = 8192;
constexpr size_t kMaxChunks = 1024;  // 8M events per thread

struct RawEvent {
  const char* category = nullptr;
  const char* name = nullptr;
  int64_t start = 0, end = 0;
  Args args;
  bool async = false;
};

// One thread's events. Only the owning thread appends; readers see the events
// below `size` (published with release after each append).
struct ThreadBuffer {
  int tid = 0;
  std::string name;  // guarded by the registry's mutex
  std::atomic<size_t> size{0};
  std::array<std::atomic<RawEvent*>, kMaxChunks> chunks{};
  std::atomic<int64_t> dropped{0};

  ~ThreadBuffer() {
    for (auto& c : chunks) delete[] c.load(std::memory_order_relaxed);
  }
  template <class F>
  void for_each(F&& f) const {
    const size_t n = size.load(std::memory_order_acquire);
    for (size_t i = 0; i < n; ++i) f(chunks[i / kChunk].load(std::memory_order_acquire)[i % kChunk]);
  }
};

struct Registry {
  std::mutex mutex;  // guards everything below (never taken on the recording path)
  std::vector<std::unique_ptr<ThreadBuffer>> buffers;
  std::set<std::string, std::less<>> interned;
  Options options;
  bool running = false;
  int64_t start_ns = 0, stop_ns = 0;
  int rank = -1;
};

// Never destroyed: threads and atexit handlers may still use it at exit.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

thread_local ThreadBuffer* t_buffer = nullptr;

ThreadBuffer* register_thread() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto b = std::make_unique<ThreadBuffer>();
  b->tid = static_cast<int>(r.buffers.size()) + 1;
  b->name = fmt::format("thread {}", b->tid);
  t_buffer = b.get();
  r.buffers.push_back(std::move(b));
  return t_buffer;
}

ThreadBuffer& this_thread_buffer() { return t_buffer != nullptr ? *t_buffer : *register_thread(); }

void append(const char* category, const char* name, int64_t start, int64_t end, const Args& args, bool async) {
  if (!enabled()) return;
  ThreadBuffer& b = this_thread_buffer();
  const size_t n = b.size.load(std::memory_order_relaxed);
  const size_t c = n / kChunk;
  if (c >= kMaxChunks) {
    b.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  RawEvent* chunk = b.chunks[c].load(std::memory_order_relaxed);
  if (chunk == nullptr) {
    chunk = new RawEvent[kChunk];
    b.chunks[c].store(chunk, std::memory_order_release);
  }
  chunk[n % kChunk] = RawEvent{category, name, start, end, args, async};
  b.size.store(n + 1, std::memory_order_release);
}

int env_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v);
  }
  return 0;
}

// A JSON string literal: quotes, backslashes and control characters escaped.
void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char ch : s) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(ch)));
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

// Exact decimal microseconds of a nanosecond count.
std::string micros(int64_t ns) {
  const bool negative = ns < 0;
  const int64_t a = negative ? -ns : ns;
  return fmt::format("{}{}.{:03}", negative ? "-" : "", a / 1000, a % 1000);
}

void append_args(std::string& out, const Args& args) {
  out += "\"args\":{";
  bool first = true;
  for (int i = 0; i < kMaxArgs && args.names[i] != nullptr; ++i) {
    if (!first) out += ',';
    first = false;
    append_json_string(out, args.names[i]);
    out += fmt::format(":{}", args.values[i]);
  }
  if (args.str_name != nullptr && args.str_value != nullptr) {
    if (!first) out += ',';
    append_json_string(out, args.str_name);
    out += ':';
    append_json_string(out, args.str_value);
  }
  out += '}';
}

std::vector<std::pair<const ThreadBuffer*, std::vector<RawEvent>>> snapshot() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::pair<const ThreadBuffer*, std::vector<RawEvent>>> out;
  for (const auto& b : r.buffers) {
    std::vector<RawEvent> v;
    b->for_each([&](const RawEvent& e) { v.push_back(e); });
    out.emplace_back(b.get(), std::move(v));
  }
  return out;
}

// Reads DTR_PROFILE once, when the program starts.
struct EnvStart {
  EnvStart() {
    const char* path = std::getenv("DTR_PROFILE");
    if (path == nullptr || *path == '\0') return;
    start({.path = path});
    std::atexit([] { finalize(); });
  }
};
EnvStart env_start;

}  // namespace

void record(const char* category, const char* name, int64_t start_ns, int64_t end_ns, const Args& args) {
  append(category, name, start_ns, end_ns, args, false);
}

void record_async(const char* category, const char* name, int64_t start_ns, int64_t end_ns, const Args& args) {
  append(category, name, start_ns, end_ns, args, true);
}

const char* intern(std::string_view s) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.interned.find(s);
  if (it == r.interned.end()) it = r.interned.emplace(s).first;
  return it->c_str();
}

void start(Options options) {
  detail::g_enabled.store(false, std::memory_order_relaxed);
  clear();
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    r.options = std::move(options);
    r.running = true;
    r.start_ns = now_ns();
    r.stop_ns = 0;
  }
  if (t_buffer == nullptr) set_thread_name("main");
  detail::g_enabled.store(true, std::memory_order_release);
}

std::string stop() {
  Options options;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    if (!r.running) return "";
    detail::g_enabled.store(false, std::memory_order_release);
    r.running = false;
    r.stop_ns = now_ns();
    options = r.options;
  }
  std::string written;
  if (!options.path.empty()) {
    written = path_for_rank(options.path, rank());
    const std::filesystem::path p(written);
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
    const std::string tmp = written + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out) throw std::runtime_error(fmt::format("profiler: cannot write {}", tmp));
      out << trace_json();
      if (!out.flush()) throw std::runtime_error(fmt::format("profiler: writing {} failed", tmp));
    }
    std::filesystem::rename(tmp, written);
  }
  if (options.print_summary && rank() == 0) {
    std::string text = summary_table(options.summary_rows);
    if (!written.empty()) text += fmt::format("trace: {} (one file per rank; open in ui.perfetto.dev)\n", written);
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }
  return written;
}

void finalize() {
  if (running()) stop();
}

bool running() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.running;
}

void clear() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (auto& b : r.buffers) {
    b->size.store(0, std::memory_order_release);
    b->dropped.store(0, std::memory_order_relaxed);
  }
}

void set_rank(int rank) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.rank = rank;
}

int rank() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.rank >= 0 ? r.rank : env_rank();
}

void set_thread_name(std::string_view name) {
  ThreadBuffer& b = this_thread_buffer();
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  b.name = std::string(name);
}

std::string path_for_rank(const std::string& path, int rank) {
  const std::string r = std::to_string(rank);
  if (const auto pos = path.find("{rank}"); pos != std::string::npos) {
    std::string out = path;
    out.replace(pos, 6, r);
    return out;
  }
  const std::filesystem::path p(path);
  if (!p.has_extension()) return path + ".rank" + r + ".json";
  return (p.parent_path() / (p.stem().string() + ".rank" + r + p.extension().string())).string();
}

std::vector<Event> events() {
  std::vector<Event> out;
  for (const auto& [buffer, raw] : snapshot()) {
    for (const RawEvent& e : raw) {
      Event ev;
      ev.category = e.category;
      ev.name = e.name;
      ev.tid = buffer->tid;
      ev.start_ns = e.start;
      ev.end_ns = e.end;
      ev.async = e.async;
      for (int i = 0; i < kMaxArgs && e.args.names[i] != nullptr; ++i) {
        ev.args.emplace_back(e.args.names[i], e.args.values[i]);
      }
      if (e.args.str_name != nullptr && e.args.str_value != nullptr) {
        ev.str_arg_name = e.args.str_name;
        ev.str_arg_value = e.args.str_value;
      }
      out.push_back(std::move(ev));
    }
  }
  return out;
}

size_t event_count() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  size_t n = 0;
  for (const auto& b : r.buffers) n += b->size.load(std::memory_order_acquire);
  return n;
}

int64_t dropped_events() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  int64_t n = 0;
  for (const auto& b : r.buffers) n += b->dropped.load(std::memory_order_relaxed);
  return n;
}

int64_t wall_ns() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (r.start_ns == 0) return 0;
  return (r.running ? now_ns() : r.stop_ns) - r.start_ns;
}

std::string trace_json() {
  const int pid = rank();
  const auto threads = snapshot();
  std::vector<std::pair<int, std::string>> names;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    for (const auto& [buffer, raw] : threads) names.emplace_back(buffer->tid, buffer->name);
  }
  std::string out = "{\"traceEvents\":[\n";
  out += fmt::format(R"({{"name":"process_name","ph":"M","pid":{},"tid":0,"args":{{"name":"rank {}"}}}})", pid, pid);
  out += fmt::format(",\n{{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":{},\"tid\":0,\"args\":{{\"sort_index\":{}}}}}",
                     pid, pid);
  for (const auto& [tid, name] : names) {
    out += fmt::format(",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":", pid, tid);
    append_json_string(out, name);
    out += "}}";
  }
  // Per thread, spans sorted by start (longer first on ties) so that parents come
  // before their children, which chrome://tracing prefers.
  int64_t async_id = 0;
  for (const auto& [buffer, raw] : threads) {
    std::vector<const RawEvent*> sorted;
    for (const RawEvent& e : raw) sorted.push_back(&e);
    std::stable_sort(sorted.begin(), sorted.end(), [](const RawEvent* a, const RawEvent* b) {
      return a->start != b->start ? a->start < b->start : a->end > b->end;
    });
    for (const RawEvent* e : sorted) {
      if (!e->async) {
        out += ",\n{\"ph\":\"X\",\"name\":";
        append_json_string(out, e->name);
        out += ",\"cat\":";
        append_json_string(out, e->category);
        out += fmt::format(",\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{},", pid, buffer->tid, micros(e->start),
                           micros(e->end - e->start));
        append_args(out, e->args);
        out += '}';
        continue;
      }
      // An async pair; the id is unique over ranks so that merged files do not collide.
      const int64_t id = (static_cast<int64_t>(pid) << 32) | ++async_id;
      for (const bool begin : {true, false}) {
        out += fmt::format(",\n{{\"ph\":\"{}\",\"name\":", begin ? 'b' : 'e');
        append_json_string(out, e->name);
        out += ",\"cat\":";
        append_json_string(out, e->category);
        out += fmt::format(",\"id\":{},\"pid\":{},\"tid\":{},\"ts\":{},", id, pid, buffer->tid,
                           micros(begin ? e->start : e->end));
        if (begin) {
          append_args(out, e->args);
        } else {
          out += "\"args\":{}";
        }
        out += '}';
      }
    }
  }
  out += fmt::format("\n],\"displayTimeUnit\":\"ms\",\"otherData\":{{\"rank\":{},\"wall_ms\":{:.3f},"
                     "\"dropped_events\":{},\"clock\":\"steady_clock\"}}}}\n",
                     pid, static_cast<double>(wall_ns()) / 1e6, dropped_events());
  return out;
}

std::vector<SpanStat> top_spans(int rows) {
  std::map<std::pair<std::string_view, std::string_view>, SpanStat> by_key;
  const auto threads = snapshot();
  for (const auto& [buffer, raw] : threads) {
    for (const RawEvent& e : raw) {
      if (e.async) continue;
      SpanStat& s = by_key[{e.category, e.name}];
      const double ms = static_cast<double>(e.end - e.start) / 1e6;
      s.count += 1;
      s.total_ms += ms;
      s.max_ms = std::max(s.max_ms, ms);
    }
  }
  const double wall_ms = static_cast<double>(wall_ns()) / 1e6;
  std::vector<SpanStat> out;
  for (auto& [key, s] : by_key) {
    s.category = std::string(key.first);
    s.name = std::string(key.second);
    s.mean_ms = s.total_ms / static_cast<double>(s.count);
    s.percent_of_wall = wall_ms > 0 ? 100.0 * s.total_ms / wall_ms : 0.0;
    out.push_back(std::move(s));
  }
  std::stable_sort(out.begin(), out.end(), [](const SpanStat& a, const SpanStat& b) { return a.total_ms > b.total_ms; });
  if (rows > 0 && out.size() > static_cast<size_t>(rows)) out.resize(static_cast<size_t>(rows));
  return out;
}

std::string summary_table(int rows) {
  const std::vector<SpanStat> stats = top_spans(rows);
  std::string out = fmt::format(
      "profile (rank {}): {:.3f} ms of wall time, {} events; top {} spans by total time (nested spans count in "
      "full in their parents too)\n",
      rank(), static_cast<double>(wall_ns()) / 1e6, event_count(), stats.size());
  out += fmt::format("{:<14} {:<44} {:>7} {:>11} {:>10} {:>10} {:>7}\n", "category", "name", "count", "total ms",
                     "mean ms", "max ms", "% wall");
  for (const SpanStat& s : stats) {
    out += fmt::format("{:<14} {:<44} {:>7} {:>11.3f} {:>10.3f} {:>10.3f} {:>7.1f}\n", s.category, s.name, s.count,
                       s.total_ms, s.mean_ms, s.max_ms, s.percent_of_wall);
  }
  return out;
}

}  // namespace dtr::profiler
