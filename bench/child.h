// Running one measurement in a child process, so that its peak RSS (wait4's ru_maxrss) belongs
// to that run alone, the thread count is read fresh and a peer's environment (its kernel set) is
// its own; shared by the benchmarks, with the few helpers that print a measurement (a table cell,
// JSON numbers and lists).
#pragma once
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "core/json.h"

extern char** environ;

namespace bench {

// One change to a child's environment: NAME=value, or NAME removed (no value).
struct EnvChange {
  std::string name;
  std::optional<std::string> value;
};

// The last non-empty line of a child's stderr, without its newline.
inline std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of("\r\n");
  if (end == std::string::npos) return "";
  const size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1,
                     end + 1 - (start == std::string::npos ? 0 : start + 1));
}

// The parent's environment with TAPEGRAD_THREADS and OMP_NUM_THREADS set to `threads` and
// `changes` applied, as NAME=VALUE strings.
inline std::vector<std::string> child_environment(int threads,
                                                  const std::vector<EnvChange>& changes) {
  std::vector<EnvChange> all = changes;
  all.push_back({"TAPEGRAD_THREADS", std::to_string(threads)});
  all.push_back({"OMP_NUM_THREADS", std::to_string(threads)});
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    bool replaced = false;
    for (const EnvChange& c : all)
      replaced |= std::strncmp(*e, (c.name + "=").c_str(), c.name.size() + 1) == 0;
    if (!replaced) env.emplace_back(*e);
  }
  for (const EnvChange& c : all)
    if (c.value) env.push_back(c.name + "=" + *c.value);
  return env;
}

// Why a child that ran did not succeed: its exit status or signal, and the last line it wrote to
// stderr (a child's own one-line message), so that the parent reports it in one line.
inline std::string child_failure(const std::string& name, int status, const std::string& stderr_) {
  std::string why =
      name + (WIFEXITED(status) ? " exited with status " + std::to_string(WEXITSTATUS(status))
                                : " was killed by signal " + std::to_string(WTERMSIG(status)));
  const std::string line = last_line(stderr_);
  return line.empty() ? why : why + ": " + line;
}

// Runs args (args[0] a path) with TAPEGRAD_THREADS and OMP_NUM_THREADS set to `threads` and the
// environment changes applied. Returns true when it exited 0; fills its stdout and peak RSS in KB,
// or `err` with what went wrong (its stderr is kept, not shown: its last line goes into `err`).
inline bool run_child(const std::vector<std::string>& args, int threads, std::string& out,
                      long& peak_rss_kb, std::string& err,
                      const std::vector<EnvChange>& changes = {}) {
  int fds[2];
  std::FILE* errf = std::tmpfile();
  if (errf == nullptr || pipe(fds) != 0) {
    err = std::string("cannot start a child: ") + std::strerror(errno);
    if (errf) std::fclose(errf);
    return false;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, fileno(errf), STDERR_FILENO);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  std::vector<std::string> env = child_environment(threads, changes);
  std::vector<char*> envp, argv;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> a = args;
  for (std::string& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    std::fclose(errf);
    err = "cannot run " + args[0] + ": " + std::strerror(rc);
    return false;
  }
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  struct rusage ru {};
  wait4(pid, &status, 0, &ru);
  peak_rss_kb = ru.ru_maxrss;  // kilobytes on Linux
  std::string child_err;
  std::rewind(errf);
  while (std::fgets(buf, sizeof buf, errf)) child_err += buf;
  std::fclose(errf);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    err = child_failure(args[0], status, child_err);
    return false;
  }
  return true;
}

// This process's peak RSS so far, in KB (a child's, measured once its inputs exist).
inline long self_peak_rss_kb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

// The path of this program, which a benchmark runs again as its children; without it (no
// /proc), one line and exit status 2.
inline std::string self_exe(const char* prog) {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    std::fprintf(stderr, "%s: cannot find its own executable\n", prog);
    std::exit(2);
  }
  return std::string(self, size_t(len));
}

// --json-file: through write_file_atomic, so a reader never sees half a file and only a regular
// file is replaced. A failure is one line and false; the caller prints its table either way.
inline bool write_json_file(const char* prog, const std::string& path, const std::string& json) {
  try {
    tg::write_file_atomic(path, json);
  } catch (const std::runtime_error& e) {
    std::fprintf(stderr, "%s: --json-file %s\n", prog, e.what());
    return false;
  }
  return true;
}

// A JSON number, or null for NaN / infinity.
inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char b[32];
  std::snprintf(b, sizeof b, "%.10g", v);
  return b;
}

// A JSON list of strings: ["a", "b"].
inline std::string json_strings(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + tg::json::quote(x);
  return "[" + s + "]";
}

// A table cell: v in the printf format f, or "-" for NaN or infinity (not measured).
inline std::string cell(const char* f, double v) {
  if (!std::isfinite(v)) return "-";
  char b[48];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

}  // namespace bench
