#include "svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>

namespace dtr::train {

namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// About five "nice" tick values (1, 2, 5 x 10^k steps) covering [lo, hi].
std::vector<double> ticks(double lo, double hi) {
  const double span = hi - lo;
  const double raw = span / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  std::vector<double> out;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push_back(v);
  return out;
}

std::string number(double v) { return fmt::format("{:g}", std::abs(v) < 1e-12 ? 0.0 : v); }

}  // namespace

std::string line_plot_svg(const std::vector<PlotSeries>& series, const PlotOptions& o) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& s : series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  }
  if (!std::isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 - x0 < 1e-12) x1 = x0 + 1;
  if (y1 - y0 < 1e-12) y0 -= 0.5, y1 += 0.5;
  const double pad = 0.05 * (y1 - y0);
  y0 = std::max(0.0, y0 - pad), y1 += pad;

  const double left = 70, right = 20, top = 40, bottom = 55;
  const double pw = o.width - left - right, ph = o.height - top - bottom;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return top + (1 - (y - y0) / (y1 - y0)) * ph; };

  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">{3}</text>\n",
      o.width, o.height, left + pw / 2, escape(o.title));
  // Grid and tick labels.
  for (const double t : ticks(x0, x1)) {
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#e5e5e5\"/>\n"
                       "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
                       px(t), top, top + ph, top + ph + 16, number(t));
  }
  for (const double t : ticks(y0, y1)) {
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#e5e5e5\"/>\n"
                       "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
                       left, py(t), left + pw, left - 6, py(t) + 4, number(t));
  }
  // Axes and their labels.
  svg += fmt::format(
      "<rect x=\"{0:.1f}\" y=\"{1:.1f}\" width=\"{2:.1f}\" height=\"{3:.1f}\" fill=\"none\" stroke=\"black\"/>\n"
      "<text x=\"{4:.1f}\" y=\"{5:.1f}\" text-anchor=\"middle\">{6}</text>\n"
      "<text x=\"16\" y=\"{7:.1f}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {7:.1f})\">{8}</text>\n",
      left, top, pw, ph, left + pw / 2, o.height - 12.0, escape(o.x_label), top + ph / 2, escape(o.y_label));
  // Curves and legend.
  double legend_y = top + 16;
  for (const auto& s : series) {
    std::string pts;
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      pts += fmt::format("{}{:.1f},{:.1f}", pts.empty() ? "" : " ", px(x), py(y));
    }
    svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n",
                       escape(s.color), pts);
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\" "
                       "stroke-width=\"2\"/>\n<text x=\"{4:.1f}\" y=\"{5:.1f}\">{6}</text>\n",
                       left + pw - 130, legend_y, left + pw - 105, escape(s.color), left + pw - 98, legend_y + 4,
                       escape(s.name));
    legend_y += 18;
  }
  svg += "</svg>\n";
  return svg;
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  auto fail = [&](const std::string& what) {
    const std::string reason = std::strerror(errno);
    std::remove(tmp.c_str());  // nothing half-written stays behind
    throw std::runtime_error(fmt::format("{}: {}", what, reason));
  };
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) fail(fmt::format("cannot write {}", tmp));
  out << text;
  out.flush();  // a full disk shows here, not only when the stream is destroyed
  if (!out) fail(fmt::format("writing {} failed", tmp));
  out.close();
  if (!out) fail(fmt::format("closing {} failed", tmp));
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(fmt::format("cannot rename {} to {}", tmp, path));
}

}  // namespace dtr::train
