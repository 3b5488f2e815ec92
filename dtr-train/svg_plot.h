// A small dependency-free SVG line-plot writer: the loss curves of a run
// (train and validation loss against the step) as loss.svg.
//
// line_plot_svg() returns a complete SVG document: a frame, labelled axes with
// tick values, one <polyline> per series (in order, even when a series has no
// points yet, so a reader always finds them) and a legend. Text is XML-escaped.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace dtr::train {

struct PlotSeries {
  std::string name;
  std::string color;                              // any SVG color, e.g. "#1f77b4"
  std::vector<std::pair<double, double>> points;  // (x, y); non-finite y are skipped
};

struct PlotOptions {
  std::string title;
  std::string x_label = "step";
  std::string y_label = "loss";
  int width = 720, height = 420;
};

std::string line_plot_svg(const std::vector<PlotSeries>& series, const PlotOptions& options);

// Writes `text` to path via a temporary file and a rename (readers never see half a file).
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace dtr::train
