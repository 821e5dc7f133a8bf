// The benchmark programs' command lines, bad settings and failed children (issues 23, 24): each
// case runs a program of bench/ with an environment, and checks its exit status (0: the help,
// 2: a bad option or TAPEGRAD_* setting, 1: a child that failed), its stdout (the help from the
// program's table in bench/*_options.h, or nothing) and its exact one-line message on stderr.
// Every case ends before anything is timed.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bench/bench_attention_options.h"
#include "bench/bench_dist_options.h"
#include "bench/bench_generate_options.h"
#include "bench/bench_matmul_options.h"
#include "bench/bench_notebook_mha_options.h"
#include "bench/bench_tokenizer_options.h"
#include "bench/bench_train_options.h"
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

#if defined(TG_UNDER_ASAN)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif

struct Result {
  int rc = -1;
  std::string out, err;
};

// Runs bench/<argv[0]> with stdout and stderr in files; returns its exit status, stdout and
// stderr.
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
  // Polled every 5 ms: a refusal takes a few, and a case per 100 ms poll was most of this
  // binary's 25 s.
  int status = 0;
  for (int polls = 0; waitpid(pid, &status, WNOHANG) == 0; ++polls) {
    if (polls == 12'000) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAIL("still running after 60 s: stopped");
    }
    usleep(5'000);
  }
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = tg::testing::slurp(out);
  r.err = tg::testing::slurp(err);
  return r;
}

std::string expand(std::string s) {
  for (size_t at = s.find("{b}"); at != std::string::npos; at = s.find("{b}", at + kBench.size()))
    s.replace(at, 3, kBench);
  return s;
}

// bench_dist is built with the mpi feature only.
constexpr bool kHaveBenchDist = TG_HAVE_BENCH_DIST;

// The benchmarks that run our kernels, and so check the TAPEGRAD_* settings.
std::vector<std::string> kernel_benches() {
  std::vector<std::string> v = {"bench_matmul", "bench_attention", "bench_train", "bench_generate"};
  if (kHaveBenchDist) v.push_back("bench_dist");
  return v;
}

// "scalar, avx2, avx512": the paths this binary has, as the kernels' error lists them.
std::string available() {
  std::string list;
  for (const std::string& isa : tg::kernels::available_isas())
    list += (list.empty() ? "" : ", ") + isa;
  return list;
}

// The parent checks the settings before it starts a child or times anything: bench_attention used
// to end in an uncaught exception (SIGABRT) on a bad TAPEGRAD_ISA, and exit 0 after its children
// aborted on a bad TAPEGRAD_GEMM_BLOCKING.
std::vector<Case> settings_cases() {
  const std::string blocking =
      "TAPEGRAD_GEMM_BLOCKING: '1,2' is not MC,KC,NC: three positive integers (MC and KC at most "
      "8192, NC at most 65536), e.g. 240,256,1024";
  const std::string threads =
      "TAPEGRAD_THREADS='0' is not a thread count: use an integer from 1 to 1024";
  const std::string huge = "TAPEGRAD_HUGE_PAGES='on' is not a switch: use 0 (the default) or 1";
  const std::string cache =
      "TAPEGRAD_BLOCK_CACHE_MB='-1' is not a size: use a whole number of MiB up to 16777216, 0 to "
      "cache nothing (the default is 2048)";
  const std::string unknown =
      "TAPEGRAD_ISA: unknown kernel path 'avx512x': use one of scalar, avx2, avx512, avx512_bf16, "
      "neon";
  std::vector<Case> v;
  for (const std::string& p : kernel_benches()) {
    v.push_back({{"TAPEGRAD_ISA=avx512x"}, {p}, 2, p + ": " + unknown});
    v.push_back({{"TAPEGRAD_GEMM_BLOCKING=1,2"}, {p}, 2, p + ": " + blocking});
    v.push_back({{"TAPEGRAD_THREADS=0"}, {p}, 2, p + ": " + threads});
    v.push_back({{"TAPEGRAD_HUGE_PAGES=on"}, {p}, 2, p + ": " + huge});
    v.push_back({{"TAPEGRAD_BLOCK_CACHE_MB=-1"}, {p}, 2, p + ": " + cache});
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
  // bench_attention --notebook checks them too, once its options are read.
  v.push_back({{"TAPEGRAD_ISA=avx512x"},
               {"bench_attention", "--notebook", "--no-torch"},
               2,
               "bench_attention: " + unknown});
  return v;
}

// Values the tables refuse, and what a row cannot say (a comma list, a path this machine has).
std::vector<Case> option_cases() {
  const std::string commas = " expects integers from 1 to 1024 separated by commas, got ";
  std::vector<Case> v = {
      {{}, {"bench_matmul", "--svg"}, 2, "bench_matmul: --svg needs a value"},
      {{}, {"bench_matmul", "--svg="}, 2, "bench_matmul: --svg is empty"},
      {{}, {"bench_matmul", "--threads", "1,0"}, 2, "bench_matmul: --threads" + commas + "'1,0'"},
      {{},
       {"bench_matmul", "--isa=avx512x"},
       2,
       "bench_matmul: --isa avx512x is not available on this machine (it has " + available() + ")"},
      {{},
       {"bench_matmul", "--shapes=big"},
       2,
       "bench_matmul: --shapes expects square, gpt2, tiny or all, got 'big'"},
      {{}, {"bench_attention", "--threads= 2"}, 2, "bench_attention: --threads" + commas + "' 2'"},
      {{},
       {"bench_attention", "--sizes=8x+256"},
       2,
       "bench_attention: --sizes T expects an integer from 1 to 65536, got '+256'"},
      {{},
       {"bench_train", "--threads=two"},
       2,
       "bench_train: --threads expects an integer from 1 to 1024, got 'two'"},
      {{},
       {"bench_train", "--only=tiny,big"},
       2,
       "bench_train: --only wants a list of tiny, gpt2-124m, gpt2-124m-1024, got 'big'"},
      {{},
       {"bench_train", "--attention", "fused,"},
       2,
       "bench_train: --attention wants a list of fused, book, got ''"},
      {{},
       {"bench_train", "--pad-vocab", "0"},
       2,
       "bench_train: --pad-vocab expects an integer from 1 to 65536, got '0'"},
      {{},
       {"bench_train", "--isa", "avx512x"},
       2,
       "bench_train: --isa avx512x is not available on this machine (it has " + available() + ")"},
      {{}, {"bench_tokenizer", "--json=1"}, 2, "bench_tokenizer: --json takes no value"},
      {{}, {"bench_tokenizer", "--mb", "1", "--mb=2"}, 2, "bench_tokenizer: --mb is given twice"},
      {{},
       {"bench_generate", "--models=gpt2-124m,gpt3"},
       2,
       "bench_generate: --models wants a list of gpt2-124m, gpt2-medium, got 'gpt3'"},
      {{},
       {"bench_generate", "--tokens", "64,0"},
       2,
       "bench_generate: --tokens expects integers from 1 to 100000 separated by commas, got "
       "'64,0'"},
      {{}, {"bench_generate", "--threads=1,x"}, 2, "bench_generate: --threads" + commas + "'1,x'"},
      {{},
       {"bench_generate", "--torch-python=/nonexistent/python"},
       2,
       "bench_generate: --torch-python: /nonexistent/python not found"},
      {{},
       {"bench_matmul", "--torch-python=/nonexistent/python"},
       2,
       "bench_matmul: --torch-python: /nonexistent/python not found"},
  };
  for (const char* prog : {"bench_attention", "bench_train"})
    v.push_back({{}, {prog, "--svg", ""}, 2, std::string(prog) + ": --svg is empty"});
  if (kHaveBenchDist) {
    v.push_back({{},
                 {"bench_dist", "--setups=1x2,gpu"},
                 2,
                 "bench_dist: --setups wants a list of 1x2, sm, tcp, torch1, torch2, got 'gpu'"});
    v.push_back({{},
                 {"bench_dist", "--only", "gpt2-124m,tiny,huge"},
                 2,
                 "bench_dist: --only wants a list of tiny, gpt2-124m, got 'huge'"});
  }
  return v;
}

// bench_train --precision: fp32, bf16 and bf16-pure, named exactly; bench_generate's and
// bench_attention's: fp32 and bf16.
std::vector<Case> precision_cases() {
  return {
      {{},
       {"bench_train", "--precision", "bf16pure"},
       2,
       "bench_train: --precision wants a list of fp32, bf16, bf16-pure, got 'bf16pure'"},
      {{},
       {"bench_train", "--precision=fp32,fp16"},
       2,
       "bench_train: --precision wants a list of fp32, bf16, bf16-pure, got 'fp16'"},
      {{},
       {"bench_train", "--precision", "fp32,"},
       2,
       "bench_train: --precision wants a list of fp32, bf16, bf16-pure, got ''"},
      {{},
       {"bench_train", "--precision=BF16"},
       2,
       "bench_train: --precision wants a list of fp32, bf16, bf16-pure, got 'BF16'"},
      {{}, {"bench_train", "--precision"}, 2, "bench_train: --precision needs a value"},
      {{},
       {"bench_generate", "--precision", "fp16"},
       2,
       "bench_generate: --precision wants a list of fp32, bf16, got 'fp16'"},
      {{},
       {"bench_generate", "--precision=bf16,"},
       2,
       "bench_generate: --precision wants a list of fp32, bf16, got ''"},
      {{},
       {"bench_attention", "--precision", "fp16"},
       2,
       "bench_attention: --precision wants a list of fp32, bf16, got 'fp16'"},
      {{},
       {"bench_attention", "--precision=bf16,"},
       2,
       "bench_attention: --precision wants a list of fp32, bf16, got ''"},
      {{},
       {"bench_attention", "--precision=BF16", "--no-torch"},
       2,
       "bench_attention: --precision wants a list of fp32, bf16, got 'BF16'"},
      {{}, {"bench_attention", "--precision"}, 2, "bench_attention: --precision needs a value"},
  };
}

// bench_attention --notebook: its notebook file (needed for PyTorch's side, checked before any
// child runs), its sizes and its list of implementations.
std::vector<Case> notebook_cases() {
  const std::string nb = "bench_attention: --notebook";
  return {
      {{},
       {"bench_attention", "--notebook"},
       2,
       nb + " needs --notebook-file FILE, the bonus notebook mha-implementations.ipynb (see "
            "bench/README.md), or --no-torch"},
      {{},
       {"bench_attention", "--json", "--notebook", "--threads", "1"},
       2,
       nb + " needs --notebook-file FILE, the bonus notebook mha-implementations.ipynb (see "
            "bench/README.md), or --no-torch"},
      {{},
       {"bench_attention", "--notebook", "--notebook-file=/nonexistent/mha.ipynb"},
       2,
       nb + "-file /nonexistent/mha.ipynb: no such file"},
      {{},
       {"bench_attention", "--notebook", "--notebook-file", "/dev/null"},
       2,
       nb + "-file /dev/null: not a regular file (a FIFO, device or socket); give a notebook file"},
      {{}, {"bench_attention", "--notebook", "--notebook-file="}, 2, nb + "-file is empty"},
      {{},
       {"bench_attention", "--notebook", "--no-torch", "--embed-dim", "100"},
       2,
       "bench_attention: --embed-dim 100 is not divisible by --num-heads 12"},
      {{},
       {"bench_attention", "--notebook", "--no-torch", "--only=ch03,flash"},
       2,
       "bench_attention: --only wants a list of wrapper, ch03, combined-qkv, einsum, sdpa, "
       "sdpa-no-flash, class, class-no-weights, flex, got 'flash'"},
      {{},
       {"bench_attention", "--notebook", "--no-torch", "--threads=1,,2"},
       2,
       "bench_attention: --threads expects integers from 1 to 1024 separated by commas, got "
       "'1,,2'"},
      {{},
       {"bench_attention", "--notebook", "--num-heads", "0"},
       2,
       "bench_attention: --num-heads expects an integer from 1 to 1024, got '0'"},
      {{}, {"bench_attention", "--notebook", "--svg", ""}, 2, "bench_attention: --svg is empty"},
      {{},
       {"bench_attention", "--notebook", "--no-torch", "--notebook"},
       2,
       "bench_attention: unknown option '--notebook' (try --help)"},
  };
}

// A child that fails is reported by the parent in one line naming it, and the parent fails:
// 824 GB of q, k, v is more than any machine this runs on will give.
std::vector<Case> child_cases() {
  const std::string child_failed =
      "bench_attention: tapegrad 'core fused' at B=4096 T=65536 on 1 thread(s) failed: "
      "{b}/bench_attention exited with status 1: ";
  const std::string notebook_failed =
      "bench_attention: tapegrad 'Ch03_MHA' on 1 thread(s) failed: {b}/bench_attention exited "
      "with status 1: ";
  return {
      {{},
       {"bench_attention", "--no-torch", "--sizes", "4096x65536", "--threads", "1"},
       1,
       child_failed + "bench_attention: randn: cannot allocate 824633720832 bytes for shape [4096, "
                      "12, 65536, 64] of torch.float32 (out of memory)",
       child_failed},
      // The notebook's classes: the input alone (4096 x 65536 x 768) is as big.
      {{},
       {"bench_attention", "--notebook", "--no-torch", "--only", "ch03", "--batch", "4096",
        "--context-len", "65536", "--threads", "1"},
       1,
       notebook_failed +
           "bench_attention: randn: cannot allocate 824633720832 bytes for shape [4096, "
           "65536, 768] of torch.float32 (out of memory)",
       notebook_failed}};
}

std::vector<Case> cases() {
  std::vector<Case> v = settings_cases();
  for (const auto& group : {option_cases(), notebook_cases(), precision_cases(), child_cases()})
    v.insert(v.end(), group.begin(), group.end());
  return v;
}

// A benchmark's table and one of its number rows, for the convention every command keeps.
struct Bench {
  std::string prog, help;
  std::string number, range;     // a row taking a number, and its range as messages say it
  std::vector<std::string> bad;  // values it refuses
  std::string mode = "";         // an option that makes it another benchmark ("--notebook")
};

// b's command line: the program, its mode, then args.
std::vector<std::string> command_line(const Bench& b, const std::vector<std::string>& args) {
  std::vector<std::string> v = {b.prog};
  if (!b.mode.empty()) v.push_back(b.mode);
  v.insert(v.end(), args.begin(), args.end());
  return v;
}

std::vector<Bench> benches() {
  using tg::cli::help_text;
  const std::vector<std::string> ints = {"ten", "+5", " 5",  "5x",
                                         "",    "0",  "1e3", "99999999999999999999"};
  std::vector<Bench> v = {
      {"bench_matmul", help_text(bench_matmul::command()), "reps", "an integer from 1 to 10000",
       ints},
      {"bench_attention", help_text(bench_attention::command()), "reps",
       "an integer from 1 to 10000", ints},
      {"bench_train", help_text(bench_train::command()), "steps-tiny",
       "an integer from 1 to 100000", ints},
      {"bench_tokenizer",
       help_text(bench_tokenizer::command()),
       "mb",
       "a number from 0.001 to 1000",
       {"ten", "+5", " 5", "5x", "", "0", "1001", "nan", "inf"}},
      {"bench_generate", help_text(bench_generate::command()), "uncached-max",
       "an integer from 1 to 100000", ints},
      {"bench_attention", help_text(bench_notebook_mha::command()), "context-len",
       "an integer from 1 to 65536", ints, "--notebook"},
  };
  if (kHaveBenchDist)
    v.push_back({"bench_dist", help_text(bench_dist::command()), "steps-124m",
                 "an integer from 1 to 100000", ints});
  return v;
}

}  // namespace

TEST_CASE("bench programs: bad options, settings and failed children give one line and a status") {
  for (const Case& c : cases()) {
    std::string what;
    for (const std::string& e : c.env) what += e + " ";
    for (const std::string& a : c.argv) what += a + " ";
    CAPTURE(what);
    const Result r = run(c);
    CHECK(r.rc == c.rc);
    CHECK(r.out.empty());
    if (kAsan && !c.asan_prefix.empty()) {
      CHECK(r.err.rfind(expand(c.asan_prefix), 0) == 0);
      CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    } else {
      CHECK(r.err == (c.message.empty() ? "" : expand(c.message) + "\n"));
    }
  }
}

// One convention for every benchmark, as for every tapegrad command (tests/test_bad_input.cpp):
// -h and --help print the table's help on stdout, wherever they stand; --name=VALUE is
// --name VALUE; an unknown option and a malformed number are one exact line and exit 2.
TEST_CASE("every benchmark: -h, --help, --name=VALUE, unknown options and bad numbers alike") {
  for (const Bench& b : benches()) {
    INFO("benchmark: ", b.prog, " ", b.mode);
    for (const char* h : {"-h", "--help"})
      for (const std::vector<std::string>& args :
           std::vector<std::vector<std::string>>{{h}, {"--bogus", h}, {"--json", h}}) {
        const Result r = run({{}, command_line(b, args), 0, ""});
        CHECK(r.rc == 0);
        CHECK(r.out == b.help);
        CHECK(r.err.empty());
      }
    for (const char* bogus : {"--bogus", "--bogus=1"}) {
      const Result r = run({{}, command_line(b, {bogus}), 2, ""});
      CHECK(r.rc == 2);
      CHECK(r.err == b.prog + ": unknown option '--bogus' (try --help)\n");
      CHECK(r.out.empty());
    }
    for (const std::string& bad : b.bad) {
      INFO("value: '", bad, "'");
      const std::string line =
          b.prog + ": --" + b.number + " expects " + b.range + ", got '" + bad + "'\n";
      for (const std::vector<std::string>& args :
           std::vector<std::vector<std::string>>{command_line(b, {"--" + b.number, bad}),
                                                 command_line(b, {"--" + b.number + "=" + bad})}) {
        const Result r = run({{}, args, 2, ""});
        CHECK(r.rc == 2);
        CHECK(r.err == line);
        CHECK(r.out.empty());
      }
    }
  }
}
