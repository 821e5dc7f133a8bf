// The option tables' machinery (see options.h): the scanner, the value parsers, the messages,
// the help text and the stored JSON.
#include "core/options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "core/text.h"

namespace tg::cli {

std::optional<int64_t> parse_int(std::string_view s) {
  int64_t v = 0;
  const auto [end, err] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || err != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_real(std::string_view s) {
  double v = 0;
  const auto [end, err] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || err != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::vector<int64_t> parse_int_list(const std::string& option, const std::string& text, int64_t min,
                                    int64_t max) {
  std::vector<int64_t> out;
  for (size_t p = 0; p <= text.size();) {
    const size_t q = std::min(text.find(',', p), text.size());
    const std::optional<int64_t> v = parse_int(std::string_view(text).substr(p, q - p));
    if (!v || *v < min || *v > max)
      throw UsageError(option + " expects integers from " + std::to_string(min) + " to " +
                       std::to_string(max) + " separated by commas, got '" + show_bytes(text) +
                       "'");
    out.push_back(*v);
    p = q + 1;
  }
  return out;
}

std::string format_real(double v) {
  char buf[64];
  const auto [end, err] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general);
  return err == std::errc() ? std::string(buf, end) : std::string("?");
}

Spec make_spec(const char* name, Kind kind, const char* meta, const char* help) {
  Spec s;
  s.name = name, s.kind = kind, s.meta = meta, s.help = help;
  return s;
}

std::string display(const Spec& s) {
  return s.short_name ? std::string{'-', s.short_name} : "--" + s.name;
}

std::string stored_key(const Spec& s) {
  if (!s.key.empty()) return s.key;
  std::string k = s.name;
  for (char& c : k)
    if (c == '-') c = '_';
  return k;
}

std::string range_text(const Spec& s) {
  switch (s.kind) {
    case Kind::Int:
      if (s.max == kNoMax) return "an integer >= " + std::to_string(s.min);
      return "an integer from " + std::to_string(s.min) + " to " + std::to_string(s.max);
    case Kind::Real: {
      const std::string lo = format_real(s.lo), hi = format_real(s.hi);
      const std::string range = s.hi == kInf ? "a number >= " + lo
                                : s.hi_open  ? "a number in [" + lo + ", " + hi + ")"
                                             : "a number from " + lo + " to " + hi;
      return s.zero_means.empty() ? range : "0 (" + s.zero_means + ") or " + range;
    }
    case Kind::Choice: {
      std::string t;
      for (size_t i = 0; i < s.choices.size(); ++i)
        t += (i == 0 ? "" : i + 1 == s.choices.size() ? " or " : ", ") + s.choices[i];
      return t;
    }
    case Kind::Flag:
      return "true or false";
    default:
      return "a string";
  }
}

namespace {

bool in_range(const Spec& s, const json::Value& v) {
  using K = json::Value::Kind;
  switch (s.kind) {
    case Kind::Int: {
      if (v.kind != K::Number) return false;
      const std::optional<int64_t> x = parse_int(v.str);
      return x && *x >= s.min && *x <= s.max;
    }
    case Kind::Real: {
      const double x = v.num;
      if (v.kind != K::Number || !std::isfinite(x)) return false;
      return (!s.zero_means.empty() && x == 0) || (x >= s.lo && (s.hi_open ? x < s.hi : x <= s.hi));
    }
    case Kind::Choice:
      for (const std::string& c : s.choices)
        if (v.kind == K::String && v.str == c) return true;
      return false;
    case Kind::Flag:
      return v.kind == K::Bool;
    default:
      return v.kind == K::String;
  }
}

// A stored value as JSON shows it: "nan" quoted, 1.5 as written, null.
std::string describe(const json::Value& v) {
  switch (v.kind) {
    case json::Value::Kind::Number:
      return v.str;
    case json::Value::Kind::String:
      return json::quote(v.str);
    case json::Value::Kind::Bool:
      return v.b ? "true" : "false";
    case json::Value::Kind::Null:
      return "null";
    case json::Value::Kind::Array:
      return "a list";
    default:
      return "an object";
  }
}

// The row an option names: "--name", "--name=..." or "-o"; nullptr for none.
const Spec* find_row(const std::vector<const Spec*>& rows, const std::string& name, size_t* at) {
  for (size_t i = 0; i < rows.size(); ++i) {
    const Spec& s = *rows[i];
    if (name == "--" + s.name || (s.short_name && name == std::string{'-', s.short_name})) {
      if (at) *at = i;
      return rows[i];
    }
  }
  return nullptr;
}

bool is_option(const std::string& a) { return a.size() > 1 && a[0] == '-'; }

// The option's name and, after '=', its value: "--lr=2" as ("--lr", "2", true).
std::tuple<std::string, std::string, bool> split_option(const std::string& a) {
  const size_t eq = a.rfind("--", 0) == 0 ? a.find('=') : std::string::npos;
  if (eq == std::string::npos) return {a, "", false};
  return {a.substr(0, eq), a.substr(eq + 1), true};
}

bool wants_help(const std::vector<const Spec*>& rows, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") return true;
    const auto [name, value, has_eq] = split_option(a);
    const Spec* s = is_option(a) ? find_row(rows, name, nullptr) : nullptr;
    if (s && s->kind != Kind::Flag && !has_eq) ++i;  // its value, whatever it says
  }
  return false;
}

void add_operand(detail::Scanned& out, const Spec* operand, const std::string& a) {
  if (!operand) throw UsageError("unexpected argument '" + show_bytes(a) + "' (try --help)");
  if (a.empty()) throw UsageError("empty " + operand->name + " name");
  if (!out.operands.empty())
    throw UsageError("more than one " + operand->name + " ('" + show_bytes(out.operands[0]) +
                     "' and '" + show_bytes(a) + "')");
  out.operands.push_back(a);
}

}  // namespace

std::string refusal(const Spec& s, const json::Value& v) {
  if (in_range(s, v)) return "";
  const bool quoted = v.kind == json::Value::Kind::String;
  return "expects " + range_text(s) + ", got " +
         (quoted ? "'" + show_bytes(v.str) + "'" : describe(v));
}

namespace detail {

namespace {

json::Value value_of(json::Value::Kind kind, double num, std::string str, bool b) {
  json::Value j;
  j.kind = kind, j.num = num, j.str = std::move(str), j.b = b;
  return j;
}

}  // namespace

json::Value number_value(int64_t v) {
  return value_of(json::Value::Kind::Number, double(v), std::to_string(v), false);
}
json::Value real_value(double v) {
  return value_of(json::Value::Kind::Number, v, format_real(v), false);
}
json::Value string_value(std::string v) {
  return value_of(json::Value::Kind::String, 0, std::move(v), false);
}
json::Value bool_value(bool v) { return value_of(json::Value::Kind::Bool, 0, "", v); }

Scanned scan(const std::vector<const Spec*>& rows, const Spec* operand, int argc, char** argv) {
  Scanned out;
  out.help = wants_help(rows, argc, argv);
  if (out.help) return out;
  std::vector<bool> seen(rows.size());
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (!is_option(a)) {
      add_operand(out, operand, a);
      continue;
    }
    auto [name, text, has_eq] = split_option(a);
    if (name == "--help" && has_eq) throw UsageError("--help takes no value");
    size_t at = 0;
    const Spec* s = find_row(rows, name, &at);
    if (!s) throw UsageError("unknown option '" + show_bytes(name) + "' (try --help)");
    if (s->kind == Kind::Flag && has_eq) throw UsageError(display(*s) + " takes no value");
    if (s->kind != Kind::Flag && !has_eq) {
      if (i + 1 >= argc) throw UsageError(display(*s) + " needs a value");
      text = argv[++i];
      // `--epochs --lr 1`: a flag of this command where a value should be is a forgotten value
      // (a value that really starts with one is written --epochs=VALUE).
      if (is_option(text) && find_row(rows, std::get<0>(split_option(text)), nullptr))
        throw UsageError(display(*s) + " needs a value, got the option " +
                         std::get<0>(split_option(text)));
    }
    for (const auto& [j, earlier] : out.values)
      if (j == at && s->kind == Kind::List && earlier == text)
        throw UsageError(display(*s) + " '" + show_bytes(text) + "' is given twice");
    if (seen[at] && s->kind != Kind::List) throw UsageError(display(*s) + " is given twice");
    seen[at] = true;
    out.values.emplace_back(at, text);
  }
  return out;
}

json::Value parse_value(const Spec& s, const std::string& text) {
  json::Value v;
  switch (s.kind) {
    case Kind::Flag:
      return bool_value(true);
    case Kind::Int: {
      const std::optional<int64_t> x = parse_int(text);
      v = x ? number_value(*x) : json::Value{};
      break;
    }
    case Kind::Real: {
      const std::optional<double> x = parse_real(text);
      v = x ? real_value(*x) : json::Value{};
      break;
    }
    default:
      if (text.empty()) throw UsageError(display(s) + " is empty");
      // Paths are named in one-line messages ("stopped after step 3 with checkpoint PATH").
      if (s.kind == Kind::Path && text.find_first_of("\n\r") != std::string::npos)
        throw UsageError(display(s) + " '" + show_bytes(text) + "' has a line break");
      if (const char* why = s.check ? s.check(text) : nullptr)
        throw UsageError(display(s) + " '" + show_bytes(text) + "' " + why);
      v = string_value(text);
  }
  if (!in_range(s, v))
    throw UsageError(display(s) + " expects " + range_text(s) + ", got '" + show_bytes(text) + "'");
  return v;
}

json::Value read_stored(const Spec& s, const json::Value& saved, const std::string& path) {
  const std::string key = stored_key(s);
  const json::Value* v = saved.find(key);
  if (!v && !s.absent.empty()) return json::parse(s.absent);
  if (!v) throw StoredOptionError(path + ": checkpoint options lack '" + key + "'");
  if (!in_range(s, *v))
    throw StoredOptionError(path + ": checkpoint option '" + key + "' expects " + range_text(s) +
                            ", got " + describe(*v));
  return *v;
}

bool same(const json::Value& a, const json::Value& b) {
  if (a.kind != b.kind) return false;
  if (a.kind == json::Value::Kind::Number) {
    const std::optional<int64_t> x = parse_int(a.str), y = parse_int(b.str);
    return x && y ? *x == *y : a.num == b.num;
  }
  return a.str == b.str && a.b == b.b;
}

std::string show_value(const json::Value& v) {
  return v.kind == json::Value::Kind::String ? show_bytes(v.str) : describe(v);
}

void add_stored(json::ObjectWriter& w, const Spec& s, const json::Value& v) {
  const std::string key = stored_key(s);
  switch (s.kind) {
    case Kind::Int:
      w.add_int(key, parse_int(v.str).value_or(0));
      break;
    case Kind::Real:
      w.add_number(key, v.num);
      break;
    case Kind::Flag:
      w.add_bool(key, v.b);
      break;
    default:
      w.add_string(key, v.str);
  }
}

namespace {

constexpr size_t kHelpColumn = 23;  // where each option's help line starts

// The range in a help line: "0 to 1000000", ">= 0", "0.001 to 1000, or 0: greedy".
std::string help_range(const Spec& s) {
  if (s.kind == Kind::Int)
    return s.max == kNoMax ? ">= " + std::to_string(s.min)
                           : std::to_string(s.min) + " to " + std::to_string(s.max);
  if (s.kind != Kind::Real) return "";
  const std::string lo = format_real(s.lo), hi = format_real(s.hi);
  const std::string r = s.hi == kInf ? ">= " + lo
                        : s.hi_open  ? "[" + lo + ", " + hi + ")"
                                     : lo + " to " + hi;
  return s.zero_means.empty() ? r : r + ", or 0: " + s.zero_means;
}

// One option's lines: the name column, the help, then "(RANGE; default: D)", on a line of its
// own when the help's last line has no room for it.
std::string help_row(const std::string& left, const std::string& help, const std::string& range,
                     const std::string& def) {
  std::string out = left;
  out += left.size() + 2 <= kHelpColumn ? std::string(kHelpColumn - left.size(), ' ') : "  ";
  std::string body = help;
  for (size_t nl = body.find('\n'); nl != std::string::npos; nl = body.find('\n', nl + 1))
    body.insert(nl + 1, std::string(kHelpColumn, ' '));
  const std::string both = !range.empty() && !def.empty() ? range + "; default: " + def
                           : !def.empty()                 ? "default: " + def
                                                          : range;
  if (!both.empty()) {
    const size_t nl = body.rfind('\n');  // continuation lines hold their indent
    const size_t col = nl == std::string::npos ? out.size() + body.size() : body.size() - nl - 1;
    body += col + both.size() + 3 > 100 ? "\n" + std::string(kHelpColumn, ' ') + "(" : " (";
    body += both + ")";
  }
  return out + body + "\n";
}

// "  LEAD a, b, c" wrapped at 100 columns, continued under the first name.
std::string wrapped_list(const std::string& lead, const std::vector<std::string>& names) {
  std::string out = "  " + lead, line = out;
  for (size_t i = 0; i < names.size(); ++i) {
    std::string word(1, ' ');
    word += names[i];
    if (i + 1 < names.size()) word += ',';
    if (line.size() + word.size() > 100) {
      line.assign(lead.size() + 2, ' ');
      out += '\n';
      out += line;
    }
    out += word, line += word;
  }
  return out + "\n";
}

// What a resumed run does with each stored flag, from the rows' Resume.
std::string resume_note(const std::vector<const Spec*>& rows) {
  std::vector<std::string> match, change;
  for (const Spec* s : rows)
    if (s->resume != Resume::NotStored)
      (s->resume == Resume::MustMatch ? match : change).push_back(display(*s));
  if (match.empty() && change.empty()) return "";
  return "On --resume, the checkpoint's options stand in for those not given. Given again,\n" +
         wrapped_list("these must match it:", match) + wrapped_list("these may change:", change);
}

}  // namespace

std::string help_text(const std::vector<const Spec*>& rows, const Spec* operand,
                      const std::string& usage, const std::string& about,
                      const std::vector<std::string>& defaults, const std::string& footer) {
  std::string out = "usage: " + usage + "\n" + about + "\n\n";
  if (operand) out += help_row("  " + operand->meta, operand->help, "", "");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Spec& s = *rows[i];
    std::string left = "  ";
    if (s.short_name) left += display(s) + ", ";
    left += "--" + s.name + (s.meta.empty() ? "" : " " + s.meta);
    out += help_row(left, s.help, help_range(s), defaults[i]);
  }
  out += help_row("  -h, --help", "this help", "", "");
  return out + resume_note(rows) + footer;
}

[[noreturn]] void exit_with(const std::string& text, std::ostream& os, int status) {
  os << text;
  os.flush();
  if (!os) {
    std::fprintf(stderr, "cannot write the output (disk full or pipe closed?)\n");
    std::exit(1);
  }
  std::exit(status);
}

}  // namespace detail

}  // namespace tg::cli
