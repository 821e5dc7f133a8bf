// core/file_io.h: files are replaced whole or not at all, and logs never end in half a line.
// Failures are forced in a forked child with RLIMIT_FSIZE: past the limit, write() is cut short
// (and then fails with EFBIG), as on a full disk.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>

#include "core/file_io.h"
#include "doctest/doctest.h"

namespace fs = std::filesystem;

namespace {

struct TempDir {
  std::string dir;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "tg_file_io_XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    dir = t;
  }
  ~TempDir() { fs::remove_all(dir); }
  std::string operator/(const std::string& name) const { return dir + "/" + name; }
  int entries() const {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir)) n += (void(e), 1);
    return n;
  }
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs fn in a child that may not write past `limit` bytes of any file. Returns 0 when fn threw
// std::runtime_error with `expect` in its message, 1 when it returned, 2 for another message.
int in_child_with_file_limit(rlim_t limit, const std::function<void()>& fn, const char* expect) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);  // else the kernel kills the writer instead of failing write()
    const rlimit rl{limit, limit};
    if (::setrlimit(RLIMIT_FSIZE, &rl) != 0) ::_exit(4);
    try {
      fn();
    } catch (const std::runtime_error& e) {
      ::_exit(std::strstr(e.what(), expect) != nullptr ? 0 : 2);
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(1);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

}  // namespace

TEST_CASE("write_file_atomic: replaces the file whole, or leaves the old one intact") {
  TempDir d;
  const std::string path = d / "ckpt.bin";
  tg::write_file_atomic(path, "old contents");
  CHECK(slurp(path) == "old contents");
  tg::write_file_atomic(path, std::string("new\0bytes", 9));
  CHECK(slurp(path) == std::string("new\0bytes", 9));
  CHECK(d.entries() == 1);  // no temp file left

  // A write cut short after 4 KiB of 1 MiB: the error names the file, the old file is kept.
  const std::string big(1 << 20, 'x');
  CHECK(in_child_with_file_limit(
            4096, [&] { tg::write_file_atomic(path, big); }, "ckpt.bin: write failed") == 0);
  CHECK(slurp(path) == std::string("new\0bytes", 9));
  CHECK(d.entries() == 1);

  // A directory that does not exist: nothing is created.
  CHECK_THROWS_WITH_AS(tg::write_file_atomic(d / "no/such/dir.bin", "x"),
                       doctest::Contains("no/such/dir.bin: cannot write"), std::runtime_error);
  CHECK(d.entries() == 1);
}

TEST_CASE("append_line: whole lines only, a short write is cut back off") {
  TempDir d;
  const std::string path = d / "log.jsonl";
  tg::append_line(path, "{\"step\": 0}");
  tg::append_line(path, "{\"step\": 5}");
  CHECK(slurp(path) == "{\"step\": 0}\n{\"step\": 5}\n");

  // 24 bytes so far; the limit lets 16 more of the 101-byte line through.
  CHECK(in_child_with_file_limit(
            40, [&] { tg::append_line(path, std::string(100, 'y')); }, "log.jsonl: write failed") ==
        0);
  CHECK(slurp(path) == "{\"step\": 0}\n{\"step\": 5}\n");

  CHECK_THROWS_WITH_AS(tg::append_line(d / "none/log.jsonl", "x"),
                       doctest::Contains("none/log.jsonl: cannot write"), std::runtime_error);
}
