// Strict parsing of the benchmarks' numeric options: a bad value gives one line naming the
// program and the option, and exit status 2; never a silent default or an uncaught exception.
#pragma once
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace bench {

[[noreturn]] inline void bad_option(const char* prog, const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", prog, what.c_str());
  std::exit(2);
}

// A whole decimal integer in [1, max].
inline long positive_int(const char* prog, const std::string& option, const std::string& s,
                         long max = 1'000'000'000) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0 || v < 1 || v > max)
    bad_option(prog,
               option + " wants an integer from 1 to " + std::to_string(max) + ", got '" + s + "'");
  return v;
}

// "1,2,4": a comma-separated list of positive integers.
inline std::vector<int> positive_ints(const char* prog, const std::string& option,
                                      const std::string& s, long max = 1024) {
  std::vector<int> v;
  for (size_t p = 0; p <= s.size();) {
    const size_t q = std::min(s.find(',', p), s.size());
    v.push_back(static_cast<int>(positive_int(prog, option, s.substr(p, q - p), max)));
    p = q + 1;
  }
  return v;
}

// A finite decimal number > 0.
inline double positive_real(const char* prog, const std::string& option, const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !(v > 0) || v > 1e9)
    bad_option(prog, option + " wants a positive number, got '" + s + "'");
  return v;
}

}  // namespace bench
