// Helpers of fuzz.h.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "fuzz/fuzz.h"

namespace tg::fuzz {

namespace {

const std::string& temp_dir() {
  static const std::string dir = [] {
    const char* t = std::getenv("TMPDIR");
    std::string tmpl = std::string(t && *t ? t : "/tmp") + "/tg_fuzz_XXXXXX";
    if (!::mkdtemp(tmpl.data())) std::abort();
    // Removed at exit (libFuzzer exits through exit(); a crash leaves it for inspection).
    static std::string keep = tmpl;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(keep, ec);
    });
    return tmpl;
  }();
  return dir;
}

}  // namespace

std::string write_temp(const std::string& name, std::string_view bytes) {
  const std::string path = temp_dir() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  std::fclose(f);
  return path;
}

std::vector<std::string> split_nul(std::string_view data) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= data.size()) {
    size_t end = data.find('\0', pos);
    if (end == std::string_view::npos) end = data.size();
    out.emplace_back(data.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

}  // namespace tg::fuzz
