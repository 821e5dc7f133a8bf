// The benchmark programs' bad settings and failed children (issue 23): each case runs a program
// of bench/ with an environment, and checks its exit status (2: a bad option or TAPEGRAD_*
// setting, 1: a child that failed) and its exact one-line message on stderr. Every case fails
// before anything is timed.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/kernels/kernels.h"
#include "tests/temp_dir.h"

extern char** environ;

namespace {

const std::string kBench = TG_BENCH_DIR;

struct Case {
  std::vector<std::string> env;   // NAME=VALUE added to the test's environment
  std::vector<std::string> argv;  // argv[0]: a program of bench/
  int rc;
  std::string message;  // the one line on stderr; "{b}" is the bench build directory
  // Under AddressSanitizer, whose allocator reports running out of memory and aborts instead of
  // returning null: what the line must start with (the child's own line differs).
  std::string asan_prefix = "";
};

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif

struct Result {
  int rc = -1;
  std::string err;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

// Runs bench/<argv[0]> with stdout and stderr in files; returns its exit status and stderr.
Result run(const Case& c) {
  tg::testing::TempDir tmp("tg_bench_errors");
  const std::string out = tmp / "out", err = tmp / "err";
  std::vector<std::string> args = c.argv, env;
  args[0] = kBench + "/" + args[0];
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  env.insert(env.end(), c.env.begin(), c.env.end());  // glibc's getenv takes the first: put first
  std::rotate(env.begin(), env.end() - long(c.env.size()), env.end());
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  for (std::string& e : env) envp.push_back(e.data());
  argv.push_back(nullptr), envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  // In a process group of its own, so that a program that does not fail early (and starts the
  // benchmark instead) is stopped with all its children after 60 s, and the case fails.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid;
  Result r;
  const int rc = posix_spawn(&pid, argv[0], &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  REQUIRE_MESSAGE(rc == 0, "cannot run " << args[0]);
  int status = 0;
  for (int tenths = 0; waitpid(pid, &status, WNOHANG) == 0; ++tenths) {
    if (tenths == 600) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAIL("still running after 60 s: stopped");
    }
    usleep(100'000);
  }
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.err = slurp(err);
  return r;
}

std::string expand(std::string s) {
  for (size_t at = s.find("{b}"); at != std::string::npos; at = s.find("{b}", at + kBench.size()))
    s.replace(at, 3, kBench);
  return s;
}

// "scalar, avx2, avx512": the paths this binary has, as the kernels' error lists them.
std::string available() {
  std::string list;
  for (const std::string& isa : tg::kernels::available_isas())
    list += (list.empty() ? "" : ", ") + isa;
  return list;
}

std::vector<Case> cases() {
  const std::string blocking =
      "TAPEGRAD_GEMM_BLOCKING: '1,2' is not MC,KC,NC: three positive integers (MC and KC at most "
      "8192, NC at most 65536), e.g. 240,256,1024";
  const std::string threads =
      "TAPEGRAD_THREADS='0' is not a thread count: use an integer from 1 to 1024";
  const std::string unknown =
      "TAPEGRAD_ISA: unknown kernel path 'avx512x': use one of scalar, avx2, avx512, neon";
  std::vector<Case> v;
  // The parent checks the settings before it starts a child: bench_attention used to end in an
  // uncaught exception (SIGABRT) on a bad TAPEGRAD_ISA, and exit 0 after its children aborted on
  // a bad TAPEGRAD_GEMM_BLOCKING.
  for (const char* prog : {"bench_matmul", "bench_attention", "bench_train"}) {
    const std::string p = prog;
    v.push_back({{"TAPEGRAD_ISA=avx512x"}, {p}, 2, p + ": " + unknown});
    v.push_back({{"TAPEGRAD_GEMM_BLOCKING=1,2"}, {p}, 2, p + ": " + blocking});
    v.push_back({{"TAPEGRAD_THREADS=0"}, {p}, 2, p + ": " + threads});
#if defined(__x86_64__)
    v.push_back({{"TAPEGRAD_ISA=neon"},
                 {p},
                 2,
                 p +
                     ": TAPEGRAD_ISA: kernel path 'neon' is not available: this binary is built "
                     "for x86-64, not aarch64 (available here: " +
                     available() + ")"});
#endif
  }
  // The option tables' convention (core/options.h): --name=VALUE, whole numbers, one line.
  v.push_back({{}, {"bench_matmul", "--svg"}, 2, "bench_matmul: --svg needs a value"});
  v.push_back({{}, {"bench_matmul", "--svg="}, 2, "bench_matmul: --svg is empty"});
  v.push_back({{},
               {"bench_matmul", "--reps=0"},
               2,
               "bench_matmul: --reps expects an integer from 1 to 10000, got '0'"});
  v.push_back({{},
               {"bench_matmul", "--threads", "1,0"},
               2,
               "bench_matmul: --threads expects integers from 1 to 1024 separated by commas, got "
               "'1,0'"});
  v.push_back({{},
               {"bench_matmul", "--isa=avx512x"},
               2,
               "bench_matmul: --isa avx512x is not available on this machine (it has " +
                   available() + ")"});
  v.push_back({{},
               {"bench_matmul", "--shapes=big"},
               2,
               "bench_matmul: --shapes expects square, gpt2, tiny or all, got 'big'"});
  v.push_back({{},
               {"bench_attention", "--threads= 2"},
               2,
               "bench_attention: --threads expects integers from 1 to 1024 separated by commas, "
               "got ' 2'"});
  v.push_back({{},
               {"bench_attention", "--sizes=8x+256"},
               2,
               "bench_attention: --sizes T expects an integer from 1 to 65536, got '+256'"});
  v.push_back({{},
               {"bench_train", "--threads=two"},
               2,
               "bench_train: --threads expects an integer from 1 to 1024, got 'two'"});
  v.push_back({{},
               {"bench_train", "--only=tiny,big"},
               2,
               "bench_train: --only wants a list of tiny, gpt2-124m, gpt2-124m-1024, got 'big'"});
  v.push_back(
      {{},
       {"bench_train", "--isa", "avx512x"},
       2,
       "bench_train: --isa avx512x is not available on this machine (it has " + available() + ")"});
  // Every benchmark answers -h and --help (the help on stdout, exit 0) and refuses an unknown
  // option in one line.
  for (const char* prog : {"bench_matmul", "bench_attention", "bench_train", "bench_tokenizer"})
    for (const char* help : {"-h", "--help"}) v.push_back({{}, {prog, help}, 0, ""});
  v.push_back({{},
               {"bench_tokenizer", "--bogus"},
               2,
               "bench_tokenizer: unknown option '--bogus' (usage: bench_tokenizer [--json] [--mb "
               "N] [--no-tiktoken])"});
  for (const char* prog : {"bench_matmul", "bench_attention", "bench_train"})
    v.push_back(
        {{}, {prog, "--bogus"}, 2, std::string(prog) + ": unknown option '--bogus' (try --help)"});
  for (const char* prog : {"bench_attention", "bench_train"})
    v.push_back({{}, {prog, "--svg", ""}, 2, std::string(prog) + ": --svg is empty"});
  // A child that fails is reported by the parent in one line naming it, and the parent fails:
  // 824 GB of q, k, v is more than any machine this runs on will give.
  const std::string child_failed =
      "bench_attention: tapegrad 'core fused' at B=4096 T=65536 on 1 thread(s) failed: "
      "{b}/bench_attention exited with status 1: ";
  v.push_back({{},
               {"bench_attention", "--no-torch", "--sizes", "4096x65536", "--threads", "1"},
               1,
               child_failed +
                   "bench_attention: randn: cannot allocate 824633720832 bytes for shape [4096, "
                   "12, 65536, 64] of torch.float32 (out of memory)",
               child_failed});
  return v;
}

}  // namespace

TEST_CASE("bench programs: bad settings and failed children give one line and an exit status") {
  for (const Case& c : cases()) {
    std::string what;
    for (const std::string& e : c.env) what += e + " ";
    for (const std::string& a : c.argv) what += a + " ";
    CAPTURE(what);
    const Result r = run(c);
    CHECK(r.rc == c.rc);
    if (kAsan && !c.asan_prefix.empty()) {
      CHECK(r.err.rfind(expand(c.asan_prefix), 0) == 0);
      CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    } else {
      CHECK(r.err == (c.message.empty() ? "" : expand(c.message) + "\n"));
    }
  }
}
