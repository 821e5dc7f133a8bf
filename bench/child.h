// Running one measurement in a child process, so that its peak RSS (wait4's ru_maxrss) belongs
// to that run alone and the thread count is read fresh; shared by bench_train and bench_attention.
#pragma once
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace bench {

// Runs args (args[0] a path) with TAPEGRAD_THREADS and OMP_NUM_THREADS set to `threads`. Returns
// true when it exited 0; fills its stdout and peak RSS in KB, or `err` with what went wrong.
inline bool run_child(const std::vector<std::string>& args, int threads, std::string& out,
                      long& peak_rss_kb, std::string& err) {
  int fds[2];
  if (pipe(fds) != 0) {
    err = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "TAPEGRAD_THREADS=", 17) != 0 && std::strncmp(*e, "OMP_NUM_THREADS=", 16))
      env.emplace_back(*e);
  env.push_back("TAPEGRAD_THREADS=" + std::to_string(threads));
  env.push_back("OMP_NUM_THREADS=" + std::to_string(threads));
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
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    err =
        args[0] + (WIFEXITED(status) ? " exited with status " + std::to_string(WEXITSTATUS(status))
                                     : " was killed by signal " + std::to_string(WTERMSIG(status)));
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

}  // namespace bench
