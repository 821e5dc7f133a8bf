// PyTorch-compatible tensor repr (torch/_tensor_str.py, identical in 1.13 and 2.4 for what we use):
// the _Formatter choice of int/fixed/scientific mode and column width, line breaking at
// linewidth, summarization with "..." above threshold, and the suffix list with its wrapping.
// Left out: complex, half/bfloat16, sparse/quantized/nested/meta tensors, named dims, devices,
// forced sci_mode (PRINT_OPTS.sci_mode) and the "Parameter containing:" wrapper.
#include "core/print.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace tg {
namespace {

[[noreturn]] void bad_input(const PrintInput& in, const std::string& why) {
  throw std::invalid_argument("format_tensor: shape " + shape_str(in.shape) + ": " + why);
}

// Python's format(x, ".{p}f") / ".{p}e": correctly rounded, never "-nan", locale-independent.
// std::to_chars gives exactly printf's digits in the C locale, so it stands in for Python here.
std::string py_float(double v, int precision, bool sci) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  // Largest fixed output: sign, 309 integer digits, point, precision digits.
  std::string buf(static_cast<size_t>(precision) + 330, '\0');
  auto fmt = sci ? std::chars_format::scientific : std::chars_format::fixed;
  auto r = std::to_chars(buf.data(), buf.data() + buf.size(), v, fmt, precision);
  if (r.ec != std::errc()) throw std::runtime_error("format_tensor: to_chars failed");
  buf.resize(static_cast<size_t>(r.ptr - buf.data()));
  return buf;
}

std::string pad_left(const std::string& s, size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

// Row-major view of the caller's values, plus which indices of each dim get printed.
struct View {
  const PrintInput& in;
  std::vector<int64_t> strides;
  bool summarize = false;
  int64_t edge = 0;

  // Indices of one dim that are printed (and seen by the formatter): all of them, or the
  // first and last `edge` ones when summarizing a dim longer than 2 * edge.
  std::vector<int64_t> kept(size_t d) const {
    std::vector<int64_t> idx;
    const int64_t n = in.shape[d];
    if (summarize && n > 2 * edge) {
      for (int64_t k = 0; k < edge; ++k) idx.push_back(k);
      for (int64_t k = n - edge; k < n; ++k) idx.push_back(k);
    } else {
      for (int64_t k = 0; k < n; ++k) idx.push_back(k);
    }
    return idx;
  }
  bool elided(size_t d) const { return summarize && in.shape[d] > 2 * edge; }
};

// torch's _Formatter: one mode and one width for the whole (summarized) tensor.
class Formatter {
 public:
  Formatter(const View& v, int precision) : in_(v.in), precision_(precision) {
    floating_ = is_floating(in_.dtype);
    // Visit exactly the printed elements, as torch builds the formatter from the summarized data.
    std::vector<int64_t> offsets{0};
    for (size_t d = 0; d < in_.shape.size(); ++d) {
      std::vector<int64_t> next;
      const auto idx = v.kept(d);
      for (int64_t o : offsets)
        for (int64_t k : idx) next.push_back(o + k * v.strides[d]);
      offsets.swap(next);
    }
    if (!floating_) {
      for (int64_t o : offsets) max_width_ = std::max(max_width_, raw(o).size());
      return;
    }
    std::vector<double> vals;  // nonzero finite values only, as torch's masked_select
    for (int64_t o : offsets) {
      const double x = in_.f[static_cast<size_t>(o)];
      if (std::isfinite(x) && x != 0) vals.push_back(x);
    }
    if (vals.empty()) return;  // all zero/nonfinite: int mode, width 1
    double mn = std::numeric_limits<double>::infinity(), mx = 0;
    for (double x : vals) {
      mn = std::min(mn, std::fabs(x));
      mx = std::max(mx, std::fabs(x));
      if (x != std::ceil(x)) int_mode_ = false;
    }
    const bool wide_range = mx / mn > 1000.0 || mx > 1.0e8;
    sci_mode_ = int_mode_ ? wide_range : (wide_range || mn < 1.0e-4);
    for (double x : vals) {
      size_t w;
      if (sci_mode_) {
        w = py_float(x, precision_, true).size();
      } else if (int_mode_) {
        w = py_float(x, 0, false).size() + 1;  // room for the trailing "."
      } else {
        w = py_float(x, precision_, false).size();
      }
      max_width_ = std::max(max_width_, w);
    }
  }

  size_t width() const { return max_width_; }

  // One element, right-aligned to the common width.
  std::string format(int64_t offset) const {
    if (!floating_) return pad_left(raw(offset), max_width_);
    const double x = in_.f[static_cast<size_t>(offset)];
    std::string s;
    if (sci_mode_) {
      s = py_float(x, precision_, true);
    } else if (int_mode_) {
      s = py_float(x, 0, false);
      if (std::isfinite(x)) s += '.';  // marks a float tensor; nan/inf stay bare
    } else {
      s = py_float(x, precision_, false);
    }
    return pad_left(s, max_width_);
  }

 private:
  std::string raw(int64_t offset) const {
    const int64_t x = in_.i[static_cast<size_t>(offset)];
    if (in_.dtype == DType::Bool) return x ? "True" : "False";
    return std::to_string(x);
  }

  const PrintInput& in_;
  int precision_;
  bool floating_ = true;
  bool int_mode_ = true;
  bool sci_mode_ = false;
  size_t max_width_ = 1;
};

// "[" + parts joined by sep + "]", built by appending (GCC 12 misreports -Wrestrict on
// const char* + std::string temporaries).
std::string bracket_join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string s = "[";
  for (size_t k = 0; k < parts.size(); ++k) {
    if (k) s += sep;
    s += parts[k];
  }
  s += ']';
  return s;
}

// n spaces after a separator prefix such as ",\n".
std::string sep_indent(const char* head, size_t newlines, int64_t spaces) {
  std::string s = head;
  s.append(newlines, '\n');
  s.append(static_cast<size_t>(std::max<int64_t>(spaces, 0)), ' ');
  return s;
}

// torch's _vector_str: as many elements per line as fit in linewidth - indent.
std::string vector_str(const View& v, const Formatter& f, const PrintOptions& opt, size_t d,
                       int64_t offset, int64_t indent) {
  const double element_length = static_cast<double>(f.width() + 2);
  const auto per_line = std::max<int64_t>(
      1, static_cast<int64_t>(
             std::floor(static_cast<double>(opt.linewidth - indent) / element_length)));
  std::vector<std::string> data;
  const auto idx = v.kept(d);
  for (size_t k = 0; k < idx.size(); ++k) {
    if (v.elided(d) && static_cast<int64_t>(k) == v.edge) data.push_back(" ...");
    data.push_back(f.format(offset + idx[k] * v.strides[d]));
  }
  std::vector<std::string> lines;
  for (size_t k = 0; k < data.size(); k += static_cast<size_t>(per_line)) {
    const size_t end = std::min(data.size(), k + static_cast<size_t>(per_line));
    std::string line;
    for (size_t j = k; j < end; ++j) {
      if (j > k) line += ", ";
      line += data[j];
    }
    lines.push_back(std::move(line));
  }
  return bracket_join(lines, sep_indent(",", 1, indent + 1));
}

// torch's _tensor_str_with_formatter for dim >= 1: sub-tensors separated by dim-1 newlines.
std::string tensor_str(const View& v, const Formatter& f, const PrintOptions& opt, size_t d,
                       int64_t offset, int64_t indent) {
  const size_t ndim = v.in.shape.size();
  if (d + 1 == ndim) return vector_str(v, f, opt, d, offset, indent);
  std::vector<std::string> slices;
  const auto idx = v.kept(d);
  for (size_t k = 0; k < idx.size(); ++k) {
    if (v.elided(d) && static_cast<int64_t>(k) == v.edge) slices.push_back("...");
    slices.push_back(tensor_str(v, f, opt, d + 1, offset + idx[k] * v.strides[d], indent + 1));
  }
  return bracket_join(slices, sep_indent(",", ndim - d - 1, indent + 1));
}

// Python's str(tuple(shape)): "(2, 0)"; a 1-tuple keeps its trailing comma.
std::string tuple_str(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d) s += ", ";
    s += std::to_string(shape[d]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

// torch's _add_suffixes. Its last_line_len counts two more than the last line's length
// (len - rfind + 1); we keep that so the wrap point matches.
std::string add_suffixes(const std::string& body, const std::vector<std::string>& suffixes,
                         int64_t indent, int64_t linewidth) {
  std::string out = body;
  const size_t nl = body.rfind('\n');
  int64_t last_line_len = static_cast<int64_t>(body.size()) -
                          (nl == std::string::npos ? -1 : static_cast<int64_t>(nl)) + 1;
  for (const auto& s : suffixes) {
    const auto len = static_cast<int64_t>(s.size());
    if (last_line_len + len + 2 > linewidth) {
      out += sep_indent(",", 1, indent);
      out += s;
      last_line_len = indent + len;
    } else {
      out += ", ";
      out += s;
      last_line_len += len + 2;
    }
  }
  return out + ")";
}

}  // namespace

std::string format_tensor(const PrintInput& in, const PrintOptions& opt) {
  // Validate before touching values: a bad shape or count would index out of bounds.
  int64_t numel = 1;
  for (int64_t n : in.shape) {
    if (n < 0) bad_input(in, "negative dimension");
    if (n != 0 && numel > std::numeric_limits<int64_t>::max() / n)
      bad_input(in, "too many elements");
    numel *= n;
  }
  const bool floating = is_floating(in.dtype);
  const size_t count = floating ? in.f.size() : in.i.size();
  if (static_cast<uint64_t>(numel) != count) {
    bad_input(in, "needs " + std::to_string(numel) + " values, got " + std::to_string(count));
  }
  if (in.dtype == DType::Bool) {
    for (int64_t x : in.i)
      if (x != 0 && x != 1) bad_input(in, "Bool value " + std::to_string(x) + " is not 0 or 1");
  }
  if (opt.precision < 0 || opt.edgeitems < 1) {
    throw std::invalid_argument("format_tensor: precision must be >= 0 and edgeitems >= 1");
  }

  const std::string prefix = "tensor(";
  const auto indent = static_cast<int64_t>(prefix.size());
  std::vector<std::string> suffixes;
  std::string body;
  if (numel == 0) {
    // No elements to infer a dtype from, so everything but the default float32 names it; NumPy
    // style, the size is shown unless the tensor is 1-D.
    body = "[]";
    if (in.shape.size() != 1) suffixes.push_back("size=" + tuple_str(in.shape));
    if (in.dtype != DType::Float32)
      suffixes.push_back(std::string("dtype=") + dtype_name(in.dtype));
  } else {
    // int64 and bool are default dtypes for printing alongside float32. bfloat16 values print
    // as the float32 they widen to (PyTorch formats self.float()), with their dtype named.
    if (in.dtype == DType::Float64 || in.dtype == DType::BFloat16)
      suffixes.push_back(std::string("dtype=") + dtype_name(in.dtype));
    View v{in, std::vector<int64_t>(in.shape.size()), numel > opt.threshold, opt.edgeitems};
    int64_t stride = 1;
    for (size_t d = in.shape.size(); d-- > 0;) {
      v.strides[d] = stride;
      stride *= in.shape[d];
    }
    const Formatter f(v, opt.precision);
    body = in.shape.empty() ? f.format(0) : tensor_str(v, f, opt, 0, 0, indent);
  }
  if (!in.grad_fn.empty()) {
    suffixes.push_back("grad_fn=<" + in.grad_fn + ">");
  } else if (in.requires_grad) {
    suffixes.push_back("requires_grad=True");
  }
  return add_suffixes(prefix + body, suffixes, indent, opt.linewidth);
}

}  // namespace tg
