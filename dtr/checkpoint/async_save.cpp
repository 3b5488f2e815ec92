#include "dtr/checkpoint/async_save.h"

#include "dtr/checkpoint/save_steps.h"
#include "dtr/checkpoint/writer.h"
#include "dtr/mesh/distributed.h"
#include "dtr/mesh/process_group.h"
#include "dtr/tensor/factory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <utility>

namespace dtr::checkpoint {

namespace fs = std::filesystem;

namespace {

// The calling thread runs at the lowest CPU priority (Linux's per-thread nice
// 19), so that on a machine whose cores are all training the write takes the
// time they leave idle (their waits for communication) rather than theirs.
void yield_to_training() {
  // Best effort: a failure leaves the thread at the process's priority.
  [[maybe_unused]] const int ignored = ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
}

// The process's one asynchronous save in flight, its background writer and the
// staging buffers kept between saves.
class AsyncSaver {
 public:
  static AsyncSaver& instance() {
    static AsyncSaver saver;
    return saver;
  }

  // A save left in flight at exit is finished writing but not committed.
  ~AsyncSaver() {
    if (writer_.joinable()) writer_.join();
  }

  void start(const fs::path& dir, const CheckpointState& state, const SaveOptions& options) {
    commit();
    const std::string what = fmt::format("asynchronous checkpoint save to {}", dir.string());
    const fs::path tmp = begin_save(dir, what);
    flight_ = Flight{dir, tmp, what, state.extra, options, {}};
    std::vector<ChunkToWrite> chunks;
    nlohmann::json tensors;
    flight_->written.error = error_of([&] {
      chunks = chunks_to_write(state, &buffers_);
      tensors = tensors_of(state);
      if (options.at_phase) options.at_phase(SavePhase::staged);
    });
    if (!flight_->written.error.empty()) {
      written_.store(true);  // nothing to write: the failure is agreed on at the commit
      return;
    }
    written_.store(false);
    writer_ = std::thread([this, chunks = std::move(chunks), tensors = std::move(tensors)] {
      yield_to_training();
      flight_->written = write_rank(chunks, tensors, flight_->tmp, flight_->options);
      written_.store(true, std::memory_order_release);
    });
  }

  std::optional<fs::path> poll() {
    if (!flight_) return std::nullopt;
    Tensor all_written = full({1}, written_.load(std::memory_order_acquire) ? 1.0 : 0.0, {.dtype = DType::f64});
    distributed::world_group()->all_reduce(all_written, mesh::ReduceOp::min())->wait();
    if (all_written.item() == 0) return std::nullopt;
    return commit();
  }

  std::optional<fs::path> commit() {
    if (!flight_) return std::nullopt;
    if (writer_.joinable()) writer_.join();
    Flight f = std::move(*flight_);
    flight_.reset();
    finish_save(f.tmp, f.dir, f.extra, f.written, f.options, f.what);
    return f.dir;
  }

  std::optional<fs::path> in_flight() const {
    if (!flight_) return std::nullopt;
    return flight_->dir;
  }

 private:
  struct Flight {
    fs::path dir, tmp;
    std::string what;
    nlohmann::json extra;
    SaveOptions options;
    RankWrite written;  // set by the writer thread; read after joining it
  };

  std::optional<Flight> flight_;
  std::atomic<bool> written_{false};
  std::thread writer_;
  StagingBuffers buffers_;
};

}  // namespace

void async_save(const fs::path& dir, const CheckpointState& state, const SaveOptions& options) {
  distributed::ensure_initialized("dtr::checkpoint::async_save");
  AsyncSaver::instance().start(dir, state, options);
}

std::optional<fs::path> poll_async_save() { return AsyncSaver::instance().poll(); }

std::optional<fs::path> wait_async_save() { return AsyncSaver::instance().commit(); }

std::optional<fs::path> async_save_in_flight() { return AsyncSaver::instance().in_flight(); }

}  // namespace dtr::checkpoint
