// The option tables (core/options.h) on a toy command: the one number parser, each refusal's
// exact line, the help text, and the stored JSON with its resume merge.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/options.h"

using namespace tg;

namespace {

struct Toy {
  int64_t n = 3;
  double rate = 0.5;
  std::string name = "a", file, mode = "fast";
  bool quick = false;
  std::vector<std::string> tags;
  std::string input;
};

const char* no_x(const std::string& v) {
  return v.find('x') != std::string::npos ? "contains an x" : nullptr;
}

const cli::Command<Toy>& toy() {
  static const cli::Command<Toy> c{
      "toy [options] FILE",
      "A command to test the tables.",
      {
          cli::integer("n", &Toy::n, 1, 10, "N", "a count").stored(cli::Resume::MustMatch),
          cli::real("rate", &Toy::rate, 0, 1, "X", "a rate")
              .half_open()
              .stored(cli::Resume::MayChange, "the_rate"),
          cli::text("name", &Toy::name, "S", "a name")
              .stored(cli::Resume::MayChange, "", "\"old\""),
          cli::path("file", &Toy::file, "FILE", "a file").short_name('f').required(),
          cli::choice("mode", &Toy::mode, {"fast", "slow", "book"}, "a route"),
          cli::flag("quick", &Toy::quick, "be quick").stored(cli::Resume::MayChange),
          cli::list("tag", &Toy::tags, "T", "a tag (may repeat)").check(no_x),
      },
      cli::path("input file", &Toy::input, "FILE|-", "the input")};
  return c;
}

// The one line a command line is refused with, or "" when it parses.
std::string refusal(std::vector<std::string> args) {
  args.insert(args.begin(), "toy");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  Toy t;
  try {
    cli::parse(toy(), int(argv.size()), argv.data(), t);
  } catch (const cli::UsageError& e) {
    return e.what();
  }
  return "";
}

Toy parsed(std::vector<std::string> args, cli::Parsed* p = nullptr) {
  args.insert(args.begin(), "toy");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  Toy t;
  const cli::Parsed r = cli::parse(toy(), int(argv.size()), argv.data(), t);
  if (p) *p = r;
  return t;
}

}  // namespace

TEST_CASE("options: one whole-value number parser") {
  CHECK(cli::parse_int("5") == 5);
  CHECK(cli::parse_int("-12") == -12);
  CHECK(cli::parse_int("9223372036854775807") == INT64_MAX);
  CHECK(cli::parse_int("-9223372036854775808") == INT64_MIN);
  for (const char* bad : {"", " 5", "+5", "5 ", "5x", "0x10", "1e3", "1.0", "-",
                          "9223372036854775808", "99999999999999999999"}) {
    INFO("text: '", bad, "'");
    CHECK(!cli::parse_int(bad));
  }
  CHECK(cli::parse_real("1e-3") == 1e-3);
  CHECK(cli::parse_real(".5") == 0.5);
  CHECK(std::isnan(*cli::parse_real("nan")));
  CHECK(std::isinf(*cli::parse_real("inf")));
  for (const char* bad : {"", " 1", "+1", "1 ", "1.5x", "0x1p3", "e5"}) {
    INFO("text: '", bad, "'");
    CHECK(!cli::parse_real(bad));
  }
  CHECK(cli::format_real(4e-4) == "0.0004");
  CHECK(cli::parse_int_list("--threads", "1,2,4", 1, 8) == std::vector<int64_t>{1, 2, 4});
  for (const char* bad : {"", "1,", ",1", "1,,2", "1, 2", "1,9", "0", "+1"}) {
    INFO("text: '", bad, "'");
    CHECK_THROWS_WITH_AS(cli::parse_int_list("--threads", bad, 1, 8),
                         ("--threads expects integers from 1 to 8 separated by commas, got '" +
                          std::string(bad) + "'")
                             .c_str(),
                         cli::UsageError);
  }
}

TEST_CASE("options: --name VALUE and --name=VALUE, short names, lists, the operand") {
  cli::Parsed p;
  const Toy a = parsed({"--n", "7", "--rate=0.25", "-f", "x.txt", "--tag", "t1", "--tag=t2",
                        "--quick", "--mode=book", "in.txt"},
                       &p);
  CHECK(a.n == 7);
  CHECK(a.rate == 0.25);
  CHECK(a.file == "x.txt");
  CHECK(a.tags == std::vector<std::string>{"t1", "t2"});
  CHECK(a.quick);
  CHECK(a.mode == "book");
  CHECK(a.input == "in.txt");
  CHECK(p.given == std::vector<std::string>{"n", "rate", "file", "tag", "tag", "quick", "mode"});
  CHECK(parsed({"--file", "-", "-"}).input == "-");  // "-" is the operand (stdin), not an option
  CHECK(parsed({"-f", "x"}).n == 3);                 // not given: the member's initialiser
}

TEST_CASE("options: each refusal is one exact line") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> table = {
      {{"-f", "x", "--n", "-3"}, "--n expects an integer from 1 to 10, got '-3'"},
      {{"-f", "x", "--n", "+5"}, "--n expects an integer from 1 to 10, got '+5'"},
      {{"-f", "x", "--n= 5"}, "--n expects an integer from 1 to 10, got ' 5'"},
      {{"-f", "x", "--n", "5 "}, "--n expects an integer from 1 to 10, got '5 '"},
      {{"-f", "x", "--n", ""}, "--n expects an integer from 1 to 10, got ''"},
      {{"-f", "x", "--n", "99999999999999999999"},
       "--n expects an integer from 1 to 10, got '99999999999999999999'"},
      {{"-f", "x", "--rate", "1"}, "--rate expects a number in [0, 1), got '1'"},
      {{"-f", "x", "--rate", "nan"}, "--rate expects a number in [0, 1), got 'nan'"},
      {{"-f", "x", "--mode", "slower"}, "--mode expects fast, slow or book, got 'slower'"},
      {{"-f", "x", "--name", ""}, "--name is empty"},
      {{"-f", ""}, "-f is empty"},
      {{"-f", "x", "--tag", "ax"}, "--tag 'ax' contains an x"},
      {{"-f", "x", "--tag", "a", "--tag", "a"}, "--tag 'a' is given twice"},
      {{"-f", "x", "--n", "1", "--n=2"}, "--n is given twice"},
      {{"-f", "x", "--file", "y"}, "-f is given twice"},
      {{"-f", "x", "--quick=1"}, "--quick takes no value"},
      {{"-f", "x", "--n"}, "--n needs a value"},
      {{"-f", "x", "--bogus=1"}, "unknown option '--bogus' (try --help)"},
      {{"-f", "x", "-q"}, "unknown option '-q' (try --help)"},
      {{"-f", "x", "a", "b"}, "more than one input file ('a' and 'b')"},
      {{"-f", "x", ""}, "empty input file name"},
      {{"--n", "2"}, "-f FILE is required"},
      {{"-f", "x", "--bogus\x1b"}, "unknown option '--bogus\\x1b' (try --help)"},
  };
  for (const auto& [args, line] : table) {
    std::string shown;
    for (const auto& a : args) shown += "'" + a + "' ";
    INFO("args: ", shown);
    CHECK(refusal(args) == line);
  }
}

TEST_CASE("options: -h and --help anywhere win, even after a bad option") {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"-h"}, {"--help"}, {"--bogus", "--help"}, {"--n", "99", "-h"}, {"a", "b", "-h"}}) {
    cli::Parsed p;
    parsed(args, &p);
    CHECK(p.help);
  }
  // A value that reads "-h" is the option's value, not a request for help.
  cli::Parsed p;
  CHECK(parsed({"-f", "x", "--name", "-h"}, &p).name == "-h");
  CHECK(!p.help);
}

TEST_CASE("options: the help text follows from the table") {
  const std::string h = cli::help_text(toy());
  CHECK(h.rfind("usage: toy [options] FILE\nA command to test the tables.\n\n", 0) == 0);
  CHECK(h.find("  FILE|-               the input\n") != std::string::npos);
  CHECK(h.find("  --n N                a count (1 to 10; default: 3)\n") != std::string::npos);
  CHECK(h.find("  --rate X             a rate ([0, 1); default: 0.5)\n") != std::string::npos);
  CHECK(h.find("  -f, --file FILE      a file\n") != std::string::npos);
  CHECK(h.find("  --quick              be quick\n") != std::string::npos);
  CHECK(h.find("  -h, --help           this help\n") != std::string::npos);
  CHECK(h.find("  these must match it: --n\n") != std::string::npos);
  CHECK(h.find("  these may change: --rate, --name, --quick\n") != std::string::npos);
}

TEST_CASE("options: stored JSON and the resume merge") {
  Toy t = parsed({"-f", "x", "--n", "4", "--rate", "0.125"});
  CHECK(cli::stored_json(toy(), t) ==
        R"({"n": 4, "the_rate": 0.125, "name": "a", "quick": false})");
  const json::Value saved = json::parse(R"({"n": 4, "the_rate": 0.75, "quick": true})");
  Toy r;
  cli::merge_stored(toy(), r, {}, saved, "ck");
  CHECK(r.n == 4);
  CHECK(r.rate == 0.75);
  CHECK(r.name == "old");  // the stand-in for a key older files lack
  CHECK(r.quick);
  Toy given;
  given.rate = 0.5;
  cli::merge_stored(toy(), given, {"rate"}, saved, "ck");  // may change
  CHECK(given.rate == 0.5);
  given.n = 5;
  CHECK_THROWS_WITH_AS(cli::merge_stored(toy(), given, {"n"}, saved, "ck"),
                       "--n 5 does not match the checkpoint ck (trained with 4); a checkpoint "
                       "from another config",
                       cli::UsageError);
  const auto stored_refusal = [](const char* text) {
    Toy x;
    try {
      cli::merge_stored(toy(), x, {}, json::parse(text), "ck");
    } catch (const cli::StoredOptionError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(stored_refusal(R"({"the_rate": 0.5, "quick": true})") == "ck: checkpoint options lack 'n'");
  CHECK(stored_refusal(R"({"n": 1.5, "the_rate": 0.5, "quick": true})") ==
        "ck: checkpoint option 'n' expects an integer from 1 to 10, got 1.5");
  CHECK(stored_refusal(R"({"n": 2, "the_rate": "nan", "quick": true})") ==
        "ck: checkpoint option 'the_rate' expects a number in [0, 1), got \"nan\"");
  CHECK(stored_refusal(R"({"n": 2, "the_rate": 0.5, "quick": 1})") ==
        "ck: checkpoint option 'quick' expects true or false, got 1");
}

TEST_CASE("json::ObjectWriter: members in order, as GPTConfig::str writes them") {
  json::ObjectWriter w;
  w.add_string("s", "a\"b").add_number("x", 0.1).add_int("i", -7).add_bool("b", true);
  CHECK(w.str() == R"({"s": "a\"b", "x": 0.10000000000000001, "i": -7, "b": true})");
  CHECK(json::ObjectWriter().str() == "{}");
}

TEST_CASE("options: the header's example for a benchmark's main") {
  struct Opts {
    int64_t reps = 5;
    std::string json_file;
    bool quick = false;
  };
  const cli::Command<Opts> kCmd{
      "bench_matmul [options]",
      "Times sgemm per table.",
      {
          cli::integer("reps", &Opts::reps, 1, 1000, "N", "best of N runs"),
          cli::path("json-file", &Opts::json_file, "FILE", "also write the table as JSON"),
          cli::flag("quick", &Opts::quick, "the small shapes only"),
      }};
  std::vector<std::string> args = {"bench_matmul", "--reps=3", "--quick"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  const Opts o = cli::parse_or_exit(kCmd, "bench_matmul", int(argv.size()), argv.data());
  CHECK(o.reps == 3);
  CHECK(o.quick);
  CHECK(o.json_file.empty());
}
