// The benchmarks' command lines, through core/options.h's tables (one convention with every
// tapegrad command: --name VALUE or --name=VALUE, -h/--help, whole-value numbers), plus what a
// table row cannot say (comma lists, a path this machine has): one line naming the program and
// the option, exit status 2; never a silent default or an uncaught exception.
#pragma once
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "core/options.h"

namespace bench {

[[noreturn]] inline void bad_option(const char* prog, const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", prog, what.c_str());
  std::exit(2);
}

// argv through the table into `out`: the help on stdout and exit 0, a refusal as one line and
// exit 2; returns the names given.
template <class T>
std::vector<std::string> parse_command(const tg::cli::Command<T>& c, const char* prog, int argc,
                                       char** argv, T& out) {
  try {
    const tg::cli::Parsed p = tg::cli::parse(c, argc, argv, out);
    if (p.help) {
      std::cout << tg::cli::help_text(c);
      std::exit(0);
    }
    return p.given;
  } catch (const tg::cli::UsageError& e) {
    bad_option(prog, e.what());
  }
}

// "1,2,4": integers in [min, max] separated by commas.
inline std::vector<int> int_list(const char* prog, const std::string& option,
                                 const std::string& text, int64_t min, int64_t max) {
  try {
    std::vector<int> v;
    for (int64_t x : tg::cli::parse_int_list(option, text, min, max)) v.push_back(int(x));
    return v;
  } catch (const tg::cli::UsageError& e) {
    bad_option(prog, e.what());
  }
}

// One whole integer in [min, max] (a child's argument, a part of a list item).
inline long whole_int(const char* prog, const std::string& what, const std::string& text, long min,
                      long max) {
  const std::optional<int64_t> v = tg::cli::parse_int(text);
  if (!v || *v < min || *v > max)
    bad_option(prog, what + " expects an integer from " + std::to_string(min) + " to " +
                         std::to_string(max) + ", got '" + text + "'");
  return long(*v);
}

// A comma-separated list whose items must be among `allowed` ("--only tiny,gpt2-124m"), read
// from a table's text row; an empty item (a stray comma) is refused as an unknown one.
inline std::vector<std::string> name_list(const char* prog, const std::string& option,
                                          const std::string& text,
                                          const std::vector<std::string>& allowed) {
  std::vector<std::string> v;
  for (size_t p = 0; p <= text.size();) {
    const size_t q = std::min(text.find(',', p), text.size());
    const std::string item = text.substr(p, q - p);
    if (std::find(allowed.begin(), allowed.end(), item) == allowed.end()) {
      std::string names;
      for (const std::string& a : allowed) names += (names.empty() ? "" : ", ") + a;
      bad_option(prog, option + " wants a list of " + names + ", got '" + item + "'");
    }
    v.push_back(item);
    p = q + 1;
  }
  return v;
}

}  // namespace bench
