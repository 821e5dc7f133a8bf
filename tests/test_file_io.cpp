// core/file_io.h: files are replaced whole or not at all, and logs never end in half a line.
// Failures are forced in a forked child with RLIMIT_FSIZE: past the limit, write() is cut short
// (and then fails with EFBIG), as on a full disk.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
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
#include <string_view>
#include <vector>

#include "core/file_io.h"
#include "doctest/doctest.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;

namespace {

using tg::testing::TempDir;

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
  TempDir d("tg_file_io");
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

TEST_CASE("write_file_atomic: pieces go out in order, more than IOV_MAX of them, empty ones too") {
  TempDir d("tg_file_io");
  const std::string path = d / "pieces.bin";
  std::vector<std::string> owned;  // piece i: i % 7 bytes of 'a' + i % 26, a 1 MiB one at 1500
  for (int i = 0; i < 3000; ++i)
    owned.push_back(std::string(i == 1500 ? 1 << 20 : i % 7, char('a' + i % 26)));
  const std::vector<std::string_view> pieces(owned.begin(), owned.end());
  std::string whole;
  for (const std::string& p : owned) whole += p;
  tg::write_file_atomic(path, pieces);
  CHECK(slurp(path) == whole);
  tg::write_file_atomic(path, std::vector<std::string_view>{});  // no piece: an empty file
  CHECK(slurp(path).empty());
  tg::write_file_atomic(path, pieces);
  // Cut short inside the big piece: the error names the file and the previous file is kept.
  CHECK(in_child_with_file_limit(
            64 << 10,
            [&] {
              tg::write_file_atomic(path, std::vector<std::string_view>{"x", whole});
            },
            "pieces.bin: write failed") == 0);
  CHECK(slurp(path) == whole);
  CHECK(d.entries() == 1);
}

TEST_CASE(
    "write_file_atomic: a path holding a directory, FIFO or device is refused, not replaced") {
  TempDir d("tg_file_io");
  const std::string dir = d / "a_dir", fifo = d / "a_fifo";
  REQUIRE(fs::create_directory(dir));
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const struct {
    std::string path, message;
  } cases[] = {
      {dir, dir + ": is a directory, not a file"},
      {fifo, fifo + ": not a regular file (a FIFO, device or socket); only a regular file is "
                    "replaced"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.path);
    CHECK_THROWS_WITH_AS(tg::write_file_atomic(c.path, "x"), c.message.c_str(), std::runtime_error);
  }
  CHECK(fs::is_directory(dir));
  CHECK(fs::is_fifo(fifo));  // still the FIFO: before the fix a rename put a regular file there
  CHECK(d.entries() == 2);   // and no temp file was left
}

TEST_CASE("append_line: whole lines only, a short write is cut back off") {
  TempDir d("tg_file_io");
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

TEST_CASE("write_file_atomic: a temp file left by a killed writer is removed by the next write") {
  TempDir d("tg_file_io");
  const std::string path = d / "checkpoint.safetensors";
  // A writer killed by SIGKILL mid-write: its temp file stays, under its (now dead) pid.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::ofstream(path + ".tmp." + std::to_string(::getpid()) + ".0.42") << "half a checkpoint";
    ::raise(SIGKILL);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFSIGNALED(status));
  // A live writer's temp file (this process's pid) and unrelated names are left alone.
  const std::string live = path + ".tmp." + std::to_string(::getpid()) + ".7.1";
  std::ofstream(live) << "being written";
  std::ofstream(d / "notes.tmp.1.2") << "not ours";
  std::ofstream(path + ".tmp.abc") << "not a writer's name";
  CHECK(d.entries() == 4);
  tg::write_file_atomic(path, "new");
  CHECK(slurp(path) == "new");
  CHECK(!fs::exists(path + ".tmp." + std::to_string(pid) + ".0.42"));
  CHECK(fs::exists(live));
  CHECK(fs::exists(d / "notes.tmp.1.2"));
  CHECK(fs::exists(path + ".tmp.abc"));
  CHECK(d.entries() == 4);
}

TEST_CASE("read_regular_file: only regular files of a bounded size, and nothing blocks") {
  TempDir d("tg_file_io");
  const std::string path = d / "t.txt";
  tg::write_file_atomic(path, "twelve bytes");
  CHECK(tg::read_regular_file(path, 12, "text") == "twelve bytes");
  CHECK_THROWS_WITH(tg::read_regular_file(path, 11, "text"),
                    (path + ": 12 bytes, more than the 11 a text file may have").c_str());
  CHECK_THROWS_WITH(tg::read_regular_file(d / "none", 100, "text"),
                    (d / "none" + ": no such file").c_str());
  CHECK_THROWS_WITH(tg::read_regular_file(d.dir, 100, "text"),
                    (d.dir + ": is a directory, not a file").c_str());
  CHECK_THROWS_WITH(tg::read_regular_file("/dev/zero", 100, "text"),
                    "/dev/zero: not a regular file (a FIFO, device or socket); give a text file");
  // A FIFO without a writer: refused at once (a blocking open would wait for ever).
  REQUIRE(::mkfifo((d / "fifo").c_str(), 0600) == 0);
  CHECK_THROWS_WITH(
      tg::read_regular_file(d / "fifo", 100, "vocabulary"),
      (d / "fifo" + ": not a regular file (a FIFO, device or socket); give a vocabulary file")
          .c_str());
  // A stream is read up to the bound, not to its end.
  std::istringstream endless(std::string(1000, 'z'));
  CHECK_THROWS_WITH(tg::read_stream(endless, "stdin", 100), "stdin: more than 100 bytes; refused");
  std::istringstream small("abc");
  CHECK(tg::read_stream(small, "stdin", 100) == "abc");
}

TEST_CASE("read_regular_file: a file whose stat size is 0 is read to its end (procfs)") {
  struct stat st {};
  REQUIRE(::stat("/proc/self/status", &st) == 0);
  REQUIRE(st.st_size == 0);
  const std::string status = tg::read_regular_file("/proc/self/status", 1 << 20, "text");
  CHECK(status.rfind("Name:", 0) == 0);
  CHECK_THROWS_WITH(tg::read_regular_file("/proc/self/status", 10, "text"),
                    "/proc/self/status: more than the 10 bytes a text file may have");
  // In blocks: the same bytes, in order.
  std::string joined;
  int blocks = 0;
  TempDir d("tg_file_io");
  tg::write_file_atomic(d / "t", "0123456789abcdef");
  tg::read_regular_file_blocks(d / "t", 100, "text", 5, [&](std::string_view b) {
    joined.append(b);
    ++blocks;
  });
  CHECK(joined == "0123456789abcdef");
  CHECK(blocks == 4);
}

TEST_CASE("find_clobbered: an output that is an input or another output, by device and inode") {
  TempDir d("tg_file_io");
  tg::write_file_atomic(d / "text", "x");
  fs::create_symlink(d / "text", d / "link");
  fs::create_directories(d / "sub");
  using P = tg::NamedPath;
  CHECK(tg::find_clobbered({{d / "text", "TEXT"}}, {{d / "out", "-o"}}).empty());
  CHECK(tg::find_clobbered({{d / "text", "TEXT"}}, {{d / "link", "-o"}}) ==
        "-o " + d / "link" + " is the same file as TEXT " + d / "text" +
            " (refused: writing one would destroy the other)");
  CHECK(!tg::find_clobbered({{d / "text", "TEXT"}}, {{d / "sub/../text", "-o"}}).empty());
  // Names not there yet: the same resolved folder and name.
  CHECK(!tg::find_clobbered({}, {P{d / "new", "a"}, P{d / "sub/../new", "b"}}).empty());
  CHECK(tg::find_clobbered({}, {P{d / "new", "a"}, P{d / "sub/new", "b"}}).empty());
  CHECK(tg::find_clobbered({{"-", "stdin"}}, {{"-", "stdout"}, {"", "--log"}, {"", "x"}}).empty());
}

TEST_CASE("DirLock: one holder at a time; a holder's death frees it; the file names the PID") {
  TempDir d("tg_file_io");
  long holder = -1;
  {
    tg::DirLock a;
    REQUIRE(a.acquire(d.dir, holder));
    CHECK(slurp(d / "tapegrad.lock") == std::to_string(::getpid()) + "\n");
    tg::DirLock b;  // another open file description: flock refuses it, even in one process
    CHECK(!b.acquire(d.dir, holder));
    CHECK(holder == ::getpid());
  }
  CHECK(!fs::exists(d / "tapegrad.lock"));  // removed on release
  // A holder killed without releasing: its file stays, its lock does not.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    tg::DirLock c;
    long h = 0;
    ::_exit(c.acquire(d.dir, h) ? 0 : 1);  // no destructor: the file is left behind
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(slurp(d / "tapegrad.lock") == std::to_string(pid) + "\n");
  tg::DirLock e;
  CHECK(e.acquire(d.dir, holder));
  CHECK_THROWS_WITH(e.acquire("/proc", holder), "/proc: cannot write (No such file or directory)");
}
