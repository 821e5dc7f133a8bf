// Command-line options from one table per command. Every tapegrad command (train, generate,
// chapter3, tokenize, bpe-train) and the benchmarks parse through here, so all of
// them keep one convention:
//   --name VALUE or --name=VALUE (a row with a short name also takes -o VALUE);
//   -h or --help anywhere prints the help, and nothing else is checked;
//   each option at most once (a list option: each value at most once);
//   numbers parse whole with std::from_chars (no blanks, no '+', nothing after) and must lie in
//   the row's range; texts and paths must not be empty;
//   every refusal is one UsageError line naming the option ("--epochs expects an integer from 0
//   to 1000000, got 'ten'"): the command prints "PROG: <what()>" and exits with status 2.
//
// A table is a Command<T>: rows Option<T>, each naming a member of T, its type, range, help line
// and (for a command that resumes, as train) what a resumed run does with it. From the table
// follow the parser (parse), the help text (help_text), the range check of a value set in code
// (refusal), and for stored rows the JSON a checkpoint keeps (stored_json) and the merge of a
// stored object into a resumed run's options (merge_stored). The default is the member's
// initialiser in T; help shows it unless the row says otherwise (shown_default).
//
// A benchmark's main, say:
//   struct Opts { int64_t reps = 5; std::string json_file; bool quick = false; };
//   const cli::Command<Opts> kCmd{"bench_matmul [options]", "Times sgemm per table.", {
//       cli::integer("reps", &Opts::reps, 1, 1000, "N", "best of N runs"),
//       cli::path("json-file", &Opts::json_file, "FILE", "also write the table as JSON"),
//       cli::flag("quick", &Opts::quick, "the small shapes only"),
//   }};
//   int main(int argc, char** argv) {
//     const Opts o = cli::parse_or_exit(kCmd, "bench_matmul", argc, argv);  // help: exit 0
//   }
// A number list ("--threads 1,2,4") is a text row read with parse_int_list.
// A refusal outside parse() (a value checked later, across options) is a UsageError too.
//
// Not here: bundled short flags (-xvf), abbreviations, "--" ending the options, negatable
// --no-X generated for flags (a table lists such a row itself).
#pragma once
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "core/json.h"

namespace tg::cli {

// A bad command line: one line, exit status 2. The one usage error type of every command.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A stored option (a checkpoint's) of the wrong type or out of range: a bad file, not a bad
// command line.
struct StoredOptionError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The whole of s as a decimal integer (std::from_chars: no blanks, no '+', nothing after, no
// overflow); nullopt otherwise.
std::optional<int64_t> parse_int(std::string_view s);
// The whole of s as a decimal number, "nan" and "inf" included (a range refuses them).
std::optional<double> parse_real(std::string_view s);
// "1,2,4": each a whole integer in [min, max], or a UsageError naming `option` ("--threads")
// and the range. For a benchmark's list of sizes or thread counts, read from a text row.
std::vector<int64_t> parse_int_list(const std::string& option, const std::string& text, int64_t min,
                                    int64_t max);
// v as the shortest text that reads back to it (4e-4 as "0.0004").
std::string format_real(double v);

enum class Kind { Int, Real, Text, Path, Choice, Flag, List };
// What a resumed run (train --resume) does with a row: NotStored, not in the checkpoint;
// MustMatch, the checkpoint's, and given again it must equal it; MayChange, the checkpoint's
// unless given.
enum class Resume { NotStored, MustMatch, MayChange };

inline constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// A row without its field: everything the parser, the help and the checks read.
struct Spec {
  std::string name;  // "batch-size": --batch-size
  Kind kind = Kind::Text;
  std::string meta;  // the value's name in the help: N, FILE
  std::string help;  // one line; '\n' continues it on the next
  char short_name = 0;
  int64_t min = 0, max = kNoMax;                       // Int
  double lo = 0, hi = kInf;                            // Real
  bool hi_open = false;                                // Real: [lo, hi)
  std::string zero_means;                              // Real: 0 is allowed too, and means this
  std::vector<std::string> choices;                    // Choice
  const char* (*check)(const std::string&) = nullptr;  // Text, List: why a value is refused
  int flag_value = 1;                                  // Flag on an int member
  bool required = false;
  std::optional<double> none;  // Int, Real: the member's "not given" marker (not range-checked)
  std::string shown_default;   // help's default when the member's initialiser says nothing
  Resume resume = Resume::NotStored;
  std::string key;     // the stored JSON key; "" : name with '-' as '_'
  std::string absent;  // JSON for the value when an older checkpoint lacks the key
};

Spec make_spec(const char* name, Kind kind, const char* meta, const char* help);

// -o for a row with a short name, else --name: how messages name an option.
std::string display(const Spec& s);
// "an integer from 0 to 1000000", "a number >= 0", "fused or book".
std::string range_text(const Spec& s);
// Why v (the member's value) is out of the row's range ("expects ..., got 5"); "" when it is not.
std::string refusal(const Spec& s, const json::Value& v);
std::string stored_key(const Spec& s);

// --- the typed rows ---------------------------------------------------------------------------

template <class T>
using Field = std::variant<int64_t T::*, uint64_t T::*, int T::*, double T::*, std::string T::*,
                           bool T::*, std::vector<std::string> T::*>;

template <class T>
struct Option {
  Spec spec;
  Field<T> field;

  Option short_name(char c) && { return spec.short_name = c, std::move(*this); }
  Option required() && { return spec.required = true, std::move(*this); }
  Option none(double marker) && { return spec.none = marker, std::move(*this); }
  Option shown_default(std::string d) && { return spec.shown_default = d, std::move(*this); }
  Option check(const char* (*f)(const std::string&)) && { return spec.check = f, std::move(*this); }
  Option flag_value(int v) && { return spec.flag_value = v, std::move(*this); }
  Option zero_means(std::string m) && { return spec.zero_means = m, std::move(*this); }
  Option half_open() && { return spec.hi_open = true, std::move(*this); }
  // Stored in a checkpoint under key ("" : the name with '_'); absent: the JSON value an older
  // checkpoint without the key stands for ("" : the key is required).
  Option stored(Resume r, std::string key = "", std::string absent = "") && {
    spec.resume = r, spec.key = key, spec.absent = absent;
    return std::move(*this);
  }
};

template <class T, class N>
Option<T> integer(const char* name, N T::*f, int64_t min, int64_t max, const char* meta,
                  const char* help) {
  static_assert(std::is_integral_v<N> && !std::is_same_v<N, bool>);
  Spec s = make_spec(name, Kind::Int, meta, help);
  s.min = min, s.max = max;
  return {s, f};
}
template <class T>
Option<T> real(const char* name, double T::*f, double lo, double hi, const char* meta,
               const char* help) {
  Spec s = make_spec(name, Kind::Real, meta, help);
  s.lo = lo, s.hi = hi;
  return {s, f};
}
template <class T>
Option<T> text(const char* name, std::string T::*f, const char* meta, const char* help) {
  return {make_spec(name, Kind::Text, meta, help), f};
}
template <class T>
Option<T> path(const char* name, std::string T::*f, const char* meta, const char* help) {
  return {make_spec(name, Kind::Path, meta, help), f};
}
template <class T>
Option<T> choice(const char* name, std::string T::*f, std::vector<std::string> choices,
                 const char* help) {
  Spec s = make_spec(name, Kind::Choice, "", help);
  for (size_t i = 0; i < choices.size(); ++i) s.meta += (i ? "|" : "") + choices[i];
  s.choices = std::move(choices);
  return {s, f};
}
template <class T, class B>  // B: bool, or int with flag_value()
Option<T> flag(const char* name, B T::*f, const char* help) {
  return {make_spec(name, Kind::Flag, "", help), f};
}
// May be given several times, with different values; each is appended.
template <class T>
Option<T> list(const char* name, std::vector<std::string> T::*f, const char* meta,
               const char* help) {
  return {make_spec(name, Kind::List, meta, help), f};
}

template <class T>
struct Command {
  Command(std::string usage_, std::string about_, std::vector<Option<T>> options_,
          std::optional<Option<T>> operand_ = std::nullopt, std::string footer_ = "")
      : usage(std::move(usage_)),
        about(std::move(about_)),
        options(std::move(options_)),
        operand(std::move(operand_)),
        footer(std::move(footer_)) {}
  std::string usage;  // after "usage: ": "tapegrad train [options]"
  std::string about;  // what it does, one or more lines
  std::vector<Option<T>> options;
  // An operand that is not an option (tokenize's FILE): a Text or Path row whose name is the
  // noun messages use ("input file"); its kind Path admits "-" (stdin).
  std::optional<Option<T>> operand;
  std::string footer;  // after the options: exit statuses, notes
};

// --- the machinery under the templates ----------------------------------------------------------

namespace detail {

struct Scanned {
  bool help = false;
  std::vector<std::pair<size_t, std::string>> values;  // (row, text as given); flags: ""
  std::vector<std::string> operands;
};
// Splits argv (argv[0] skipped) by the rows: unknown options, missing values, repeats and extra
// operands refused; -h/--help found anywhere wins.
Scanned scan(const std::vector<const Spec*>& rows, const Spec* operand, int argc, char** argv);
// A value as the row reads it: refused (UsageError) when malformed or out of range.
json::Value parse_value(const Spec& s, const std::string& text);
json::Value number_value(int64_t v);
json::Value real_value(double v);
json::Value string_value(std::string v);
json::Value bool_value(bool v);
// The stored value of a row in `saved` (or its `absent` stand-in), type and range checked.
// Throws StoredOptionError.
json::Value read_stored(const Spec& s, const json::Value& saved, const std::string& path);
bool same(const json::Value& a, const json::Value& b);
std::string show_value(const json::Value& v);
std::string help_text(const std::vector<const Spec*>& rows, const Spec* operand,
                      const std::string& usage, const std::string& about,
                      const std::vector<std::string>& defaults, const std::string& footer);
void add_stored(json::ObjectWriter& w, const Spec& s, const json::Value& v);
[[noreturn]] void exit_with(const std::string& line, std::ostream& os, int status);

template <class T>
json::Value get(const T& o, const Option<T>& row) {
  return std::visit(
      [&](auto f) -> json::Value {
        using M = std::remove_cvref_t<decltype(o.*f)>;
        if constexpr (std::is_same_v<M, bool>)
          return bool_value(o.*f);
        else if constexpr (std::is_same_v<M, double>)
          return real_value(o.*f);
        else if constexpr (std::is_same_v<M, std::string>)
          return string_value(o.*f);
        else if constexpr (std::is_same_v<M, std::vector<std::string>>)
          return json::Value{};
        else
          return number_value(int64_t(o.*f));
      },
      row.field);
}

template <class T>
void set(T& o, const Option<T>& row, const json::Value& v) {
  std::visit(
      [&](auto f) {
        using M = std::remove_cvref_t<decltype(o.*f)>;
        if constexpr (std::is_same_v<M, bool>)
          o.*f = v.b;
        else if constexpr (std::is_same_v<M, double>)
          o.*f = v.num;
        else if constexpr (std::is_same_v<M, std::string>)
          o.*f = v.str;
        else if constexpr (std::is_same_v<M, std::vector<std::string>>)
          (o.*f).push_back(v.str);
        else if (v.kind == json::Value::Kind::Bool)
          o.*f = M(row.spec.flag_value);
        else
          o.*f = M(v.as_int());
      },
      row.field);
}

template <class T>
std::vector<const Spec*> specs(const Command<T>& c) {
  std::vector<const Spec*> v;
  for (const Option<T>& row : c.options) v.push_back(&row.spec);
  return v;
}

}  // namespace detail

// --- what follows from a table ------------------------------------------------------------------

struct Parsed {
  bool help = false;               // -h or --help: nothing else was read
  std::vector<std::string> given;  // the names given, in order
};

// Reads argv (argv[0], the command's name, is skipped) into `out`, whose members not given keep
// their values. Throws UsageError.
template <class T>
Parsed parse(const Command<T>& c, int argc, char** argv, T& out) {
  const Spec* operand = c.operand ? &c.operand->spec : nullptr;
  const detail::Scanned s = detail::scan(detail::specs(c), operand, argc, argv);
  Parsed p;
  p.help = s.help;
  if (p.help) return p;
  for (const auto& [i, text] : s.values) {
    detail::set(out, c.options[i], detail::parse_value(c.options[i].spec, text));
    p.given.push_back(c.options[i].spec.name);
  }
  for (const std::string& text : s.operands)
    detail::set(out, *c.operand, detail::parse_value(*operand, text));
  for (const Option<T>& row : c.options) {
    bool seen = false;
    for (const std::string& g : p.given) seen = seen || g == row.spec.name;
    if (row.spec.required && !seen)
      throw UsageError(display(row.spec) + " " + row.spec.meta + " is required");
  }
  if (operand && operand->required && s.operands.empty())
    throw UsageError("missing the " + operand->name);
  return p;
}

// The help: usage, about, one line per row with its default, -h/--help, the footer.
template <class T>
std::string help_text(const Command<T>& c) {
  // Static, not on the stack: detail::get reads the member through every alternative of
  // Field<T>, those T has no member of included (never taken), and GCC 12 at -O2/-O3 sees such a
  // read (a 32-byte std::string) run past a small T (bench_tokenizer's 16 bytes of bools and a
  // double) and calls it maybe-uninitialized; it does not track static storage.
  static const T defaults_of{};
  std::vector<std::string> defaults;
  for (const Option<T>& row : c.options) {
    const Spec& s = row.spec;
    const json::Value v = detail::get(defaults_of, row);
    const bool unset = (s.none && v.kind == json::Value::Kind::Number && v.num == *s.none) ||
                       s.kind == Kind::Flag || s.kind == Kind::List || v.str.empty();
    defaults.push_back(!s.shown_default.empty() ? s.shown_default
                       : unset                  ? ""
                                                : detail::show_value(v));
  }
  return detail::help_text(detail::specs(c), c.operand ? &c.operand->spec : nullptr, c.usage,
                           c.about, defaults, c.footer);
}

// For a program's own main (the benchmarks): the options, or the help on stdout and exit 0, or
// "PROG: <what()>" on stderr and exit 2.
template <class T>
T parse_or_exit(const Command<T>& c, const char* prog, int argc, char** argv) {
  T out{};
  try {
    if (parse(c, argc, argv, out).help) detail::exit_with(help_text(c), std::cout, 0);
  } catch (const UsageError& e) {
    detail::exit_with(std::string(prog) + ": " + e.what() + "\n", std::cerr, 2);
  }
  return out;
}

// The first row whose value in `o` (set in code, or merged from a checkpoint) is out of range,
// with refusal()'s text; {nullptr, ""} when all are in range. Rows for which skip(spec, value)
// is true are passed over (a "not given" marker, say).
template <class T, class Skip>
std::pair<const Spec*, std::string> first_refusal(const Command<T>& c, const T& o, Skip skip) {
  for (const Option<T>& row : c.options) {
    const Kind k = row.spec.kind;
    if (k != Kind::Int && k != Kind::Real && k != Kind::Choice) continue;  // no range
    if (skip(row.spec, detail::get(o, row))) continue;
    const std::string why = refusal(row.spec, detail::get(o, row));
    if (!why.empty()) return {&row.spec, why};
  }
  return {nullptr, ""};
}

// The stored rows of `o` as one JSON object, in table order.
template <class T>
std::string stored_json(const Command<T>& c, const T& o) {
  json::ObjectWriter w;
  for (const Option<T>& row : c.options)
    if (row.spec.resume != Resume::NotStored) detail::add_stored(w, row.spec, detail::get(o, row));
  return w.str();
}

// A resumed run's options: every stored row not in `given` takes the stored value; a given
// MustMatch row must equal it (UsageError naming both). A stored value of the wrong type or out
// of range, given again or not, is a StoredOptionError naming `path` and the key.
template <class T>
void merge_stored(const Command<T>& c, T& o, const std::vector<std::string>& given,
                  const json::Value& saved, const std::string& path) {
  for (const Option<T>& row : c.options) {
    const Spec& s = row.spec;
    bool explicit_ = false;
    for (const std::string& g : given) explicit_ = explicit_ || g == s.name;
    if (s.resume == Resume::NotStored) continue;
    const json::Value v = detail::read_stored(s, saved, path);  // checked even when given again
    if (!explicit_) {
      detail::set(o, row, v);
    } else if (s.resume == Resume::MustMatch && saved.find(stored_key(s)) &&
               !detail::same(detail::get(o, row), v)) {
      throw UsageError("--" + s.name + " " + detail::show_value(detail::get(o, row)) +
                       " does not match the checkpoint " + path + " (trained with " +
                       detail::show_value(v) + "); a checkpoint from another config");
    }
  }
}

}  // namespace tg::cli
