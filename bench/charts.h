// --svg for the benchmarks: train/plot.h's bar charts, a failure reported as one line naming the
// program, so that the caller still prints its table and then exits with status 1.
#pragma once
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "train/plot.h"

namespace bench {

// plot_bars(path, title, panels, footnote); false (after one line on stderr) when it failed.
inline bool draw_bars(const char* prog, const std::string& path, const std::string& title,
                      const std::vector<tg::train::BarPanel>& panels, const std::string& footnote) {
  try {
    tg::train::plot_bars(path, title, panels, footnote);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: --svg %s\n", prog, e.what());
    return false;
  }
  return true;
}

}  // namespace bench
