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

}  // namespace

void plot_losses(const std::string& path, const std::vector<EvalPoint>& evals, int64_t num_epochs) {
  const double W = 660, H = 400, L = 70, R = 40, Tm = 50, B = 55;
  const double pw = W - L - R, ph = H - Tm - B;
  const double xmax = double(std::max<int64_t>(num_epochs, 1));
  double ymin = 1e300, ymax = -1e300;
  for (const EvalPoint& p : evals)
    for (double v : {p.train_loss, p.val_loss})
      if (std::isfinite(v)) {
        ymin = std::min(ymin, v);
        ymax = std::max(ymax, v);
      }
  if (ymin > ymax) ymin = 0, ymax = 1;
  const double pad = (ymax - ymin) * 0.05 + 1e-6;
  ymin -= pad;
  ymax += pad;
  auto X = [&](double e) { return L + pw * e / xmax; };
  auto Y = [&](double v) { return Tm + ph * (1 - (v - ymin) / (ymax - ymin)); };
  // torch.linspace(0, num_epochs, len(train_losses))
  const size_t n = evals.size();
  auto epoch_of = [&](size_t i) { return n > 1 ? xmax * double(i) / double(n - 1) : 0.0; };

  std::string s;
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(W, 0) + "\" height=\"" +
       num(H, 0) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<rect x=\"" + num(L) + "\" y=\"" + num(Tm) + "\" width=\"" + num(pw) + "\" height=\"" +
       num(ph) + "\" fill=\"none\" stroke=\"black\"/>\n";
  for (double t : ticks(0, xmax, 6)) {
    s += "<line x1=\"" + num(X(t)) + "\" y1=\"" + num(Tm + ph) + "\" x2=\"" + num(X(t)) +
         "\" y2=\"" + num(Tm + ph + 5) + "\" stroke=\"black\"/>";
    s += "<text x=\"" + num(X(t)) + "\" y=\"" + num(Tm + ph + 18) + "\" text-anchor=\"middle\">" +
         num(t, t == std::floor(t) ? 0 : 1) + "</text>\n";
  }
  for (double t : ticks(ymin, ymax, 6)) {
    s += "<line x1=\"" + num(L - 5) + "\" y1=\"" + num(Y(t)) + "\" x2=\"" + num(L) + "\" y2=\"" +
         num(Y(t)) + "\" stroke=\"black\"/>";
    s += "<text x=\"" + num(L - 8) + "\" y=\"" + num(Y(t) + 4) + "\" text-anchor=\"end\">" +
         num(std::abs(t) < 1e-9 ? 0.0 : t, 1) + "</text>\n";  // no "-0.0"
  }
  // Top axis: tokens seen at a few evaluations (the book's ax2 = ax1.twiny()).
  if (n > 0) {
    const size_t k = std::min<size_t>(n, 6);
    for (size_t j = 0; j < k; ++j) {
      const size_t i = k > 1 ? j * (n - 1) / (k - 1) : 0;
      const double x = X(epoch_of(i));
      s += "<line x1=\"" + num(x) + "\" y1=\"" + num(Tm - 5) + "\" x2=\"" + num(x) + "\" y2=\"" +
           num(Tm) + "\" stroke=\"black\"/>";
      s += "<text x=\"" + num(x) + "\" y=\"" + num(Tm - 9) + "\" text-anchor=\"middle\">" +
           tokens_label(double(evals[i].tokens_seen)) + "</text>\n";
    }
  }
  s += "<text x=\"" + num(L + pw / 2) + "\" y=\"" + num(H - 12) +
       "\" text-anchor=\"middle\">Epochs</text>\n";
  s += "<text x=\"" + num(L + pw / 2) + "\" y=\"16\" text-anchor=\"middle\">Tokens seen</text>\n";
  s += "<text transform=\"translate(18," + num(Tm + ph / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">Loss</text>\n";
  auto polyline = [&](bool val, const char* color, const char* dash) {
    std::string pts;
    for (size_t i = 0; i < n; ++i) {
      const double v = val ? evals[i].val_loss : evals[i].train_loss;
      if (!std::isfinite(v)) continue;
      pts += num(X(epoch_of(i))) + "," + num(Y(v)) + " ";
    }
    s += "<polyline fill=\"none\" stroke=\"" + std::string(color) + "\" stroke-width=\"1.5\"" +
         (dash ? std::string(" stroke-dasharray=\"") + dash + "\"" : "") + " points=\"" + pts +
         "\"/>\n";
  };
  polyline(false, "#1f77b4", nullptr);
  polyline(true, "#ff7f0e", "8,3,2,3");  // linestyle="-."
  const double lx = L + pw - 150, ly = Tm + 12;
  s += "<rect x=\"" + num(lx - 8) + "\" y=\"" + num(ly - 10) +
       "\" width=\"150\" height=\"42\" fill=\"white\" stroke=\"#ccc\"/>\n";
  s += "<line x1=\"" + num(lx) + "\" y1=\"" + num(ly) + "\" x2=\"" + num(lx + 24) + "\" y2=\"" +
       num(ly) + "\" stroke=\"#1f77b4\" stroke-width=\"1.5\"/><text x=\"" + num(lx + 30) +
       "\" y=\"" + num(ly + 4) + "\">Training loss</text>\n";
  s += "<line x1=\"" + num(lx) + "\" y1=\"" + num(ly + 20) + "\" x2=\"" + num(lx + 24) +
       "\" y2=\"" + num(ly + 20) +
       "\" stroke=\"#ff7f0e\" stroke-width=\"1.5\" stroke-dasharray=\"8,3,2,3\"/><text x=\"" +
       num(lx + 30) + "\" y=\"" + num(ly + 24) + "\">Validation loss</text>\n";
  if (n == 0)
    s += "<text x=\"" + num(L + pw / 2) + "\" y=\"" + num(Tm + ph / 2) +
         "\" text-anchor=\"middle\">no evaluations yet</text>\n";
  s += "</svg>\n";
  write_file_atomic(path, s);
}

}  // namespace tg::train
