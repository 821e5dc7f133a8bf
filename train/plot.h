// The book's plot_losses (§5.2) as a standalone SVG: training loss (solid) and validation loss
// (dash-dot) against epochs seen, evaluations spread evenly over [0, num_epochs] as the book's
// torch.linspace does, with a second x axis on top labelled in tokens seen.
#pragma once
#include <string>
#include <vector>

namespace tg::train {

struct EvalPoint;

// Writes the SVG atomically; with no evaluations the plot has axes and a note only.
void plot_losses(const std::string& path, const std::vector<EvalPoint>& evals, int64_t num_epochs);

}  // namespace tg::train
