// The book's plot_losses (§5.2) as a standalone SVG: training loss (solid) and validation loss
// (dash-dot) against epochs seen, evaluations spread evenly over [0, num_epochs] as the book's
// torch.linspace does, with a second x axis on top labelled in tokens seen. Beside it, the
// benchmarks' bar charts (plot_bars), drawn with the same axes and ticks.
#pragma once
#include <string>
#include <vector>

namespace tg::train {

struct EvalPoint;

// Writes the SVG atomically; with no evaluations the plot has axes and a note only.
void plot_losses(const std::string& path, const std::vector<EvalPoint>& evals, int64_t num_epochs);

// One panel of a bar chart: for each category along x, one bar per series (a NaN value: no bar),
// and optionally a line series drawn across the categories (a bound, e.g. the FMA probe).
struct BarSeries {
  std::string name;
  std::vector<double> values;  // one per category
};
struct BarPanel {
  std::string title, y_label;
  std::vector<std::string> categories;
  std::vector<BarSeries> bars;
  BarSeries line;  // empty name: none
};

// The panels stacked in one SVG, a title and a footnote (the machine) above and below, written
// atomically; throws what write_file_atomic throws.
void plot_bars(const std::string& path, const std::string& title, const std::vector<BarPanel>& p,
               const std::string& footnote);

}  // namespace tg::train
