// SVG loss plot (see plot.h).
#include "train/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/file_io.h"
#include "train/trainer.h"

namespace tg::train {

namespace {

std::string num(double v, int decimals = 2) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// About n round tick values covering [lo, hi].
std::vector<double> ticks(double lo, double hi, int n) {
  const double span = hi - lo > 0 ? hi - lo : 1;
  const double raw = span / n;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + 1e-9 * span; v += step) t.push_back(v);
  return t;
}

std::string tokens_label(double v) {
  if (v >= 1e6) return num(v / 1e6, 1) + "M";
  if (v >= 1e3) return num(v / 1e3, 1) + "k";
  return num(v, 0);
}

// Where things go: the plot area inside the margins, and data-to-pixel maps.
struct Frame {
  double W = 660, H = 400, L = 70, R = 40, Tm = 50, B = 55;
  double pw = W - L - R, ph = H - Tm - B;
  double xmax = 1, ymin = 0, ymax = 1;
  size_t n = 0;  // evaluations

  double X(double epoch) const { return L + pw * epoch / xmax; }
  double Y(double loss) const { return Tm + ph * (1 - (loss - ymin) / (ymax - ymin)); }
  // torch.linspace(0, num_epochs, len(train_losses))
  double epoch_of(size_t i) const { return n > 1 ? xmax * double(i) / double(n - 1) : 0.0; }
};

Frame frame_for(const std::vector<EvalPoint>& evals, int64_t num_epochs) {
  Frame f;
  f.n = evals.size();
  f.xmax = double(std::max<int64_t>(num_epochs, 1));
  double ymin = 1e300, ymax = -1e300;
  for (const EvalPoint& p : evals)
    for (double v : {p.train_loss, p.val_loss})
      if (std::isfinite(v)) {
        ymin = std::min(ymin, v);
        ymax = std::max(ymax, v);
      }
  if (ymin > ymax) ymin = 0, ymax = 1;
  const double pad = (ymax - ymin) * 0.05 + 1e-6;
  f.ymin = ymin - pad;
  f.ymax = ymax + pad;
  return f;
}

// The box, epochs along the bottom and the loss up the side.
std::string axes(const Frame& f) {
  std::string s = "<rect x=\"" + num(f.L) + "\" y=\"" + num(f.Tm) + "\" width=\"" + num(f.pw) +
                  "\" height=\"" + num(f.ph) + "\" fill=\"none\" stroke=\"black\"/>\n";
  for (double t : ticks(0, f.xmax, 6)) {
    s += "<line x1=\"" + num(f.X(t)) + "\" y1=\"" + num(f.Tm + f.ph) + "\" x2=\"" + num(f.X(t)) +
         "\" y2=\"" + num(f.Tm + f.ph + 5) + "\" stroke=\"black\"/>";
    s += "<text x=\"" + num(f.X(t)) + "\" y=\"" + num(f.Tm + f.ph + 18) +
         "\" text-anchor=\"middle\">" + num(t, t == std::floor(t) ? 0 : 1) + "</text>\n";
  }
  for (double t : ticks(f.ymin, f.ymax, 6)) {
    s += "<line x1=\"" + num(f.L - 5) + "\" y1=\"" + num(f.Y(t)) + "\" x2=\"" + num(f.L) +
         "\" y2=\"" + num(f.Y(t)) + "\" stroke=\"black\"/>";
    s += "<text x=\"" + num(f.L - 8) + "\" y=\"" + num(f.Y(t) + 4) + "\" text-anchor=\"end\">" +
         num(std::abs(t) < 1e-9 ? 0.0 : t, 1) + "</text>\n";  // no "-0.0"
  }
  return s;
}

// Top axis: tokens seen at a few evaluations (the book's ax2 = ax1.twiny()).
std::string tokens_axis(const Frame& f, const std::vector<EvalPoint>& evals) {
  std::string s;
  const size_t k = std::min<size_t>(f.n, 6);
  for (size_t j = 0; j < k; ++j) {
    const size_t i = k > 1 ? j * (f.n - 1) / (k - 1) : 0;
    const double x = f.X(f.epoch_of(i));
    s += "<line x1=\"" + num(x) + "\" y1=\"" + num(f.Tm - 5) + "\" x2=\"" + num(x) + "\" y2=\"" +
         num(f.Tm) + "\" stroke=\"black\"/>";
    s += "<text x=\"" + num(x) + "\" y=\"" + num(f.Tm - 9) + "\" text-anchor=\"middle\">" +
         tokens_label(double(evals[i].tokens_seen)) + "</text>\n";
  }
  return s;
}

std::string loss_line(const Frame& f, const std::vector<EvalPoint>& evals, bool val,
                      const char* color, const char* dash) {
  std::string pts;
  for (size_t i = 0; i < f.n; ++i) {
    const double v = val ? evals[i].val_loss : evals[i].train_loss;
    if (!std::isfinite(v)) continue;
    pts += num(f.X(f.epoch_of(i))) + "," + num(f.Y(v)) + " ";
  }
  return "<polyline fill=\"none\" stroke=\"" + std::string(color) + "\" stroke-width=\"1.5\"" +
         (dash ? std::string(" stroke-dasharray=\"") + dash + "\"" : "") + " points=\"" + pts +
         "\"/>\n";
}

std::string legend(const Frame& f) {
  const double lx = f.L + f.pw - 150, ly = f.Tm + 12;
  return "<rect x=\"" + num(lx - 8) + "\" y=\"" + num(ly - 10) +
         "\" width=\"150\" height=\"42\" fill=\"white\" stroke=\"#ccc\"/>\n" + "<line x1=\"" +
         num(lx) + "\" y1=\"" + num(ly) + "\" x2=\"" + num(lx + 24) + "\" y2=\"" + num(ly) +
         "\" stroke=\"#1f77b4\" stroke-width=\"1.5\"/><text x=\"" + num(lx + 30) + "\" y=\"" +
         num(ly + 4) + "\">Training loss</text>\n" + "<line x1=\"" + num(lx) + "\" y1=\"" +
         num(ly + 20) + "\" x2=\"" + num(lx + 24) + "\" y2=\"" + num(ly + 20) +
         "\" stroke=\"#ff7f0e\" stroke-width=\"1.5\" stroke-dasharray=\"8,3,2,3\"/><text x=\"" +
         num(lx + 30) + "\" y=\"" + num(ly + 24) + "\">Validation loss</text>\n";
}

// ---- bar charts (plot_bars) ----

const char* const kBarColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                  "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

std::string escape(const std::string& t) {
  std::string s;
  for (char c : t)
    s += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  return s;
}

std::string text(double x, double y, const std::string& t, const char* anchor,
                 const char* extra = "") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" text-anchor=\"" + anchor + "\"" + extra +
         ">" + escape(t) + "</text>\n";
}

// The panel's y range: from 0 to a little above its largest value.
double panel_ymax(const BarPanel& p) {
  double ymax = 0;
  for (const BarSeries& b : p.bars)
    for (double v : b.values)
      if (std::isfinite(v)) ymax = std::max(ymax, v);
  for (double v : p.line.values)
    if (std::isfinite(v)) ymax = std::max(ymax, v);
  return ymax > 0 ? ymax * 1.08 : 1;
}

// One panel in the box (L, top, pw, ph): y ticks, the bars, the line, the category labels.
std::string bar_panel(const BarPanel& p, double L, double top, double pw, double ph) {
  const double ymax = panel_ymax(p);
  auto Y = [&](double v) { return top + ph * (1 - v / ymax); };
  std::string s = "<rect x=\"" + num(L) + "\" y=\"" + num(top) + "\" width=\"" + num(pw) +
                  "\" height=\"" + num(ph) + "\" fill=\"none\" stroke=\"black\"/>\n";
  for (double t : ticks(0, ymax, 5)) {
    s += "<line x1=\"" + num(L) + "\" y1=\"" + num(Y(t)) + "\" x2=\"" + num(L + pw) + "\" y2=\"" +
         num(Y(t)) + "\" stroke=\"#e0e0e0\"/>";
    s += text(L - 6, Y(t) + 4, num(t, t == std::floor(t) ? 0 : 1), "end");
  }
  s += text(L + pw / 2, top - 8, p.title, "middle", " font-weight=\"bold\"");
  s += "<text transform=\"translate(" + num(L - 52) + "," + num(top + ph / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">" + escape(p.y_label) + "</text>\n";
  const size_t nc = std::max<size_t>(p.categories.size(), 1),
               nb = std::max<size_t>(p.bars.size(), 1);
  const double cw = pw / double(nc), bw = cw * 0.8 / double(nb);
  for (size_t c = 0; c < p.categories.size(); ++c) {
    const double x0 = L + cw * double(c) + cw * 0.1;
    for (size_t b = 0; b < p.bars.size(); ++b) {
      const double v = c < p.bars[b].values.size() ? p.bars[b].values[c] : NAN;
      if (!std::isfinite(v)) continue;
      s += "<rect x=\"" + num(x0 + bw * double(b)) + "\" y=\"" + num(Y(v)) + "\" width=\"" +
           num(bw * 0.95) + "\" height=\"" + num(top + ph - Y(v)) + "\" fill=\"" +
           kBarColors[b % 8] + "\"/>";
    }
    s += "<text transform=\"translate(" + num(L + cw * (double(c) + 0.5)) + "," +
         num(top + ph + 12) + ") rotate(30)\" font-size=\"10\">" + escape(p.categories[c]) +
         "</text>\n";
  }
  // The line as steps, level across each category's cell: one category still shows it.
  std::string pts;
  for (size_t c = 0; c < p.line.values.size() && c < p.categories.size(); ++c)
    if (std::isfinite(p.line.values[c]))
      pts += num(L + cw * (double(c) + 0.05)) + "," + num(Y(p.line.values[c])) + " " +
             num(L + cw * (double(c) + 0.95)) + "," + num(Y(p.line.values[c])) + " ";
  if (!pts.empty())
    s += "<polyline fill=\"none\" stroke=\"black\" stroke-width=\"1.5\" stroke-dasharray=\"6,3\" "
         "points=\"" +
         pts + "\"/>\n";
  return s;
}

// The series' names and colours, in a row under the title.
std::string bar_legend(const BarPanel& p, double x, double y) {
  std::string s;
  for (size_t b = 0; b < p.bars.size(); ++b) {
    s += "<rect x=\"" + num(x) + "\" y=\"" + num(y - 9) + "\" width=\"12\" height=\"10\" fill=\"" +
         kBarColors[b % 8] + "\"/>" + text(x + 16, y, p.bars[b].name, "start");
    x += 30 + 7.0 * double(p.bars[b].name.size());
  }
  if (!p.line.name.empty())
    s += "<line x1=\"" + num(x) + "\" y1=\"" + num(y - 4) + "\" x2=\"" + num(x + 20) + "\" y2=\"" +
         num(y - 4) + "\" stroke=\"black\" stroke-width=\"1.5\" stroke-dasharray=\"6,3\"/>" +
         text(x + 24, y, p.line.name, "start");
  return s;
}

}  // namespace

void plot_bars(const std::string& path, const std::string& title,
               const std::vector<BarPanel>& panels, const std::string& footnote) {
  size_t widest = 1;
  for (const BarPanel& p : panels) widest = std::max(widest, p.categories.size());
  const double L = 80, R = 80, pw = std::max(560.0, 46.0 * double(widest)), ph = 220;
  const double head = 70, step = ph + 130;
  const double W = L + pw + R, H = head + step * double(panels.size()) + 20;
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(W, 0) +
                  "\" height=\"" + num(H, 0) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += text(W / 2, 20, title, "middle", " font-size=\"15\"");
  s += text(W / 2, 38, footnote, "middle", " font-size=\"10\"");
  if (!panels.empty()) s += bar_legend(panels[0], L, 58);
  for (size_t i = 0; i < panels.size(); ++i)
    s += bar_panel(panels[i], L, head + 20 + step * double(i), pw, ph);
  s += "</svg>\n";
  write_file_atomic(path, s);
}

void plot_losses(const std::string& path, const std::vector<EvalPoint>& evals, int64_t num_epochs) {
  const Frame f = frame_for(evals, num_epochs);
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(f.W, 0) +
                  "\" height=\"" + num(f.H, 0) +
                  "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += axes(f) + tokens_axis(f, evals);
  s += "<text x=\"" + num(f.L + f.pw / 2) + "\" y=\"" + num(f.H - 12) +
       "\" text-anchor=\"middle\">Epochs</text>\n";
  s += "<text x=\"" + num(f.L + f.pw / 2) +
       "\" y=\"16\" text-anchor=\"middle\">Tokens seen</text>\n";
  s += "<text transform=\"translate(18," + num(f.Tm + f.ph / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">Loss</text>\n";
  s += loss_line(f, evals, false, "#1f77b4", nullptr);
  s += loss_line(f, evals, true, "#ff7f0e", "8,3,2,3");  // linestyle="-."
  s += legend(f);
  if (f.n == 0)
    s += "<text x=\"" + num(f.L + f.pw / 2) + "\" y=\"" + num(f.Tm + f.ph / 2) +
         "\" text-anchor=\"middle\">no evaluations yet</text>\n";
  s += "</svg>\n";
  write_file_atomic(path, s);
}

}  // namespace tg::train
