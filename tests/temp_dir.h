// A fresh scratch directory (mkdtemp under the system's temp dir) for one test, removed with all
// it holds when the test ends.
#pragma once
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace tg::testing {

struct TempDir {
  std::string dir;
  explicit TempDir(const std::string& prefix = "tg_test") {
    std::string t = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    dir = t;
  }
  ~TempDir() { std::filesystem::remove_all(dir); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return dir + "/" + name; }
  int entries() const {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) n += (void(e), 1);
    return n;
  }
};

// A whole file's bytes, and a file made of bytes (test fixtures: spliced checkpoints and weights).
inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
inline void spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace tg::testing
