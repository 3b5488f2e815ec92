#include "metrics.h"

#include "svg_plot.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace dtr::train {

double model_flops_per_token(int64_t num_params, const nn::TransformerConfig& model, int64_t seq_len) {
  return 6.0 * static_cast<double>(num_params) +
         12.0 * static_cast<double>(model.n_layers * model.dim) * static_cast<double>(seq_len);
}

namespace {

std::optional<double> number_of(const nlohmann::json& row, const char* key) {
  if (!row.contains(key) || !row[key].is_number()) return std::nullopt;
  return row[key].get<double>();
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, int64_t resumed_step) : path_(path) {
  std::string kept_text;
  if (resumed_step > 0) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      const nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!row.is_object() || !row.contains("step") || !row["step"].is_number_integer()) continue;
      const int64_t step = row["step"].get<int64_t>();
      if (step > resumed_step) continue;
      kept_.push_back({step, number_of(row, "loss"), number_of(row, "val_loss")});
      kept_text += line + '\n';
    }
  }
  write_file_atomic(path, kept_text);
  out_.open(path, std::ios::app);
  if (!out_) throw std::runtime_error(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
}

void MetricsWriter::write(const StepRecord& r) {
  nlohmann::json j = {{"step", r.step},
                      {"loss", r.loss},
                      {"lr", r.lr},
                      {"grad_norm", r.grad_norm},
                      {"tokens", r.tokens},
                      {"step_seconds", r.step_seconds},
                      {"elapsed_seconds", r.elapsed_seconds},
                      {"tokens_per_second", r.tokens_per_second},
                      {"flops_per_second", r.flops_per_second},
                      {"comm_bytes_within_host", r.comm_bytes_within_host},
                      {"comm_bytes_across_hosts", r.comm_bytes_across_hosts}};
  if (r.val_loss) j["val_loss"] = *r.val_loss;
  if (!r.samples.empty()) j["samples"] = r.samples;
  if (r.mfu) j["mfu"] = *r.mfu;
  if (r.skipped) j["skipped"] = true;
  // A non-finite loss is written as null (JSON has no NaN).
  for (const char* key : {"loss", "grad_norm"}) {
    if (!std::isfinite(j[key].get<double>())) j[key] = nullptr;
  }
  // A line is written whole or not at all: after a failed write (a full disk) the
  // file is cut back to the end of the previous line.
  const std::streamoff before = out_.tellp();
  out_ << j.dump() << '\n';
  out_.flush();
  if (!out_) {
    const std::string reason = std::strerror(errno);
    out_.close();
    std::error_code ignored;
    std::filesystem::resize_file(path_, static_cast<uintmax_t>(before), ignored);
    throw std::runtime_error(fmt::format("writing {} failed after step {}: {}", path_, r.step - 1, reason));
  }
}

void LossCurves::add(const LoggedStep& logged) {
  if (logged.loss) train_.emplace_back(static_cast<double>(logged.step), *logged.loss);
  if (logged.val_loss) val_.emplace_back(static_cast<double>(logged.step), *logged.val_loss);
}

void LossCurves::add(const StepRecord& r) {
  if (std::isfinite(r.loss)) train_.emplace_back(static_cast<double>(r.step), r.loss);
  if (r.val_loss && std::isfinite(*r.val_loss)) val_.emplace_back(static_cast<double>(r.step), *r.val_loss);
}

void LossCurves::write() const {
  write_file_atomic(path_, line_plot_svg({{"train loss", "#1f77b4", train_}, {"validation loss", "#d62728", val_}},
                                         {.title = title_}));
}

namespace {

std::string si(double v) {
  if (v >= 1e12) return fmt::format("{:.2f}T", v / 1e12);
  if (v >= 1e9) return fmt::format("{:.2f}G", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02d}", s / 60, s % 60);
}

std::string progress_line(const StepRecord& r, const RankPeaks& peaks) {
  const int width = static_cast<int>(std::to_string(r.total_steps).size());
  std::string line = fmt::format("step {:>{}}/{} | loss {:.4f}", r.step, width, r.total_steps, r.loss);
  if (r.skipped) line += " (skipped: not finite)";
  if (r.val_loss) line += fmt::format(" | val {:.4f}", *r.val_loss);
  line += fmt::format(" | lr {:.2e} | gnorm {:.3f} | {} tok/s | {}FLOP/s", r.lr, r.grad_norm,
                      si(r.tokens_per_second), si(r.flops_per_second));
  if (r.mfu) line += fmt::format(" | MFU {:.1f}%", 100 * *r.mfu);
  if (!peaks.empty()) {
    line += " | peak MiB";
    static constexpr const char* kShort[kNumMemoryTags] = {"p", "g", "o", "a", "c", "s", "x"};
    for (size_t rank = 0; rank < peaks.size(); ++rank) {
      line += fmt::format(" r{}", rank);
      for (size_t t = 0; t < static_cast<size_t>(kNumMemoryTags); ++t) line += fmt::format(" {}{:.1f}", kShort[t], static_cast<double>(peaks[rank][t]) / (1 << 20));
    }
  }
  const double per_step = r.elapsed_seconds / static_cast<double>(r.step);
  line += fmt::format(" | ETA {}", format_duration(per_step * static_cast<double>(r.total_steps - r.step)));
  return line;
}

std::string progress_bar(int64_t step, int64_t total, int width) {
  const auto filled = static_cast<int>(static_cast<double>(width) * static_cast<double>(step) / static_cast<double>(total));
  return fmt::format("[{}{}] {:3d}%  {}/{}", std::string(static_cast<size_t>(filled), '#'),
                     std::string(static_cast<size_t>(width - filled), '.'),
                     static_cast<int>(100 * step / total), step, total);
}

}  // namespace dtr::train
