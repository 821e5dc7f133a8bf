// Bad input never crashes, hangs or passes silently (issue 16): a table of bad command lines and
// files per command, each checked for its exit status (2: bad command line, 1: bad input or a
// failure) and its exact one-line message on stderr, with nothing on stdout.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "app/cli_options.h"
#include "app/commands.h"
#include "app/tokenize_cmd.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;

namespace {

// One scratch directory for the table, with the files the cases name.
struct Files {
  tg::testing::TempDir scratch{"tg_bad_input"};
  fs::path dir = scratch.dir;
  Files() {
    std::ofstream(dir / "empty.txt").flush();
    std::ofstream(dir / "junk") << "hello";
    fs::create_directories(dir / "emptydir");
    REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);  // no writer: a blocking open hangs
    fs::create_directories(dir / "ck");
    std::ofstream(dir / "ck" / "checkpoint.safetensors") << "not really";
    fs::create_symlink(dir / "junk", dir / "link");  // the same file as junk
    fs::create_directories(dir / "ck2" / "checkpoint.safetensors");
    fs::create_directories(dir / "o3");
    REQUIRE(::mkfifo((dir / "o3" / "loss.svg").c_str(), 0600) == 0);
    std::ofstream(dir / "aaaa") << std::string(10000, 'a');  // one chunk of 10000 bytes
  }
};

struct Case {
  std::vector<std::string> argv;  // argv[0] picks the command; "{d}" is the scratch directory
  int rc;
  std::string message;  // the one line on stderr, "{d}" replaced likewise
};

std::string expand(std::string s, const std::string& dir) {
  for (size_t at = s.find("{d}"); at != std::string::npos; at = s.find("{d}", at + dir.size()))
    s.replace(at, 3, dir);
  return s;
}

struct Result {
  int rc;
  std::string out, err;
};

// Runs one command in-process; bpe-train takes explicit streams, the others write to std::cout /
// std::cerr, redirected here (tokenize: run_tokenize, which also gives it an empty stdin).
Result run(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  const int argc = int(argv.size());
  std::ostringstream out, err;
  const std::string& cmd = args[0];
  auto* old_out = std::cout.rdbuf(out.rdbuf());
  auto* old_err = std::cerr.rdbuf(err.rdbuf());
  int rc = -1;
  if (cmd == "train") rc = tg::cli::train_main(argc, argv.data());
  if (cmd == "generate") rc = tg::cli::generate_main(argc, argv.data());
  if (cmd == "chapter3") rc = tg::cli::chapter3_main(argc, argv.data());
  if (cmd == "bpe-train") rc = tg::data::bpe_train_main(argc, argv.data(), out, err);
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  return {rc, out.str(), err.str()};
}

Result run_tokenize(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::ostringstream out, err;
  std::istringstream in("");
  const int rc = tg::data::tokenize_main(int(argv.size()), argv.data(), in, out, err);
  return {rc, out.str(), err.str()};
}

void check_table(const std::vector<Case>& cases) {
  const Files f;
  for (const Case& c : cases) {
    std::vector<std::string> argv;
    for (const auto& a : c.argv) argv.push_back(expand(a, f.dir.string()));
    const Result r = argv[0] == "tokenize" ? run_tokenize(argv) : run(argv);
    std::string line;
    for (const auto& a : argv) line += "'" + a + "' ";
    INFO("command: ", line);
    INFO("stderr: ", r.err);
    CHECK(r.rc == c.rc);
    CHECK(r.err == "tapegrad " + argv[0] + ": " + expand(c.message, f.dir.string()) + "\n");
    CHECK(r.out.empty());
  }
}

const std::string kNotRegular = ": not a regular file (a FIFO, device or socket); give a ";
const std::string kClobber = " (refused: writing one would destroy the other)";
const std::string kLongMerge =
    "{d}/aaaa: merge 12 would make a token of 8192 bytes, more than the 4096 a token may have (the "
    "text has a run of letters, digits, punctuation or spaces that long)";

}  // namespace

// One convention for every command: -h and --help print the table's help on stdout; --name=VALUE
// is --name VALUE; an unknown option and a malformed number are one exact line and exit 2.
TEST_CASE("every command: -h, --help, --name=VALUE, unknown options and bad numbers alike") {
  struct Command {
    std::string name, help;
    std::string number;  // an option taking a number ("" : none), and its range text
    std::string range;
  };
  const std::vector<Command> commands = {
      {"train", tg::cli::help_text(tg::train::train_command()), "epochs",
       "an integer from 0 to 1000000"},
      {"generate", tg::cli::help_text(tg::cli::generate_command()), "max-new-tokens",
       "an integer from 0 to 100000"},
      {"chapter3", tg::cli::help_text(tg::cli::chapter3_command()), "cell",
       "an integer from 2 to 38"},
      {"tokenize", tg::cli::help_text(tg::data::tokenize_command()), "", ""},
      {"bpe-train", tg::cli::help_text(tg::data::bpe_train_command()), "vocab-size",
       "an integer from 256 to 1000000"},
  };
  for (const Command& c : commands) {
    INFO("command: ", c.name);
    auto go = [&](std::vector<std::string> args) {
      args.insert(args.begin(), c.name);
      return c.name == "tokenize" ? run_tokenize(args) : run(args);
    };
    for (const char* h : {"-h", "--help"}) {
      for (const auto& args : std::vector<std::vector<std::string>>{{h}, {"--bogus", h}}) {
        const Result r = go(args);
        CHECK(r.rc == 0);
        CHECK(r.out == c.help);
        CHECK(r.err.empty());
      }
    }
    const std::string prefix = "tapegrad " + c.name + ": ";
    for (const auto& args : std::vector<std::vector<std::string>>{{"--bogus"}, {"--bogus=1"}}) {
      const Result r = go(args);
      CHECK(r.rc == 2);
      CHECK(r.err == prefix + "unknown option '--bogus' (try --help)\n");
      CHECK(r.out.empty());
    }
    if (c.number.empty()) continue;
    for (const std::string bad : {"ten", "+5", " 5", "5 ", "5x", "", "0x10", "1e3",
                                  "99999999999999999999", "-99999999999999999999"}) {
      INFO("value: '", bad, "'");
      const std::string line =
          prefix + "--" + c.number + " expects " + c.range + ", got '" + bad + "'\n";
      for (const auto& args : std::vector<std::vector<std::string>>{
               {"--" + c.number, bad}, {"--" + c.number + "=" + bad}}) {
        const Result r = go(args);
        CHECK(r.rc == 2);
        CHECK(r.err == line);
        CHECK(r.out.empty());
      }
    }
  }
}

// --name=VALUE and --name VALUE read the same value, in every parser.
// The parser on two command lines: (parse(a), parse(b)).
template <class Parse>
auto parse_both(std::vector<std::string> a, std::vector<std::string> b, Parse parse) {
  auto one = [&](std::vector<std::string>& args) {
    std::vector<char*> v;
    for (auto& x : args) v.push_back(x.data());
    return parse(int(v.size()), v.data());
  };
  return std::make_pair(one(a), one(b));
}

TEST_CASE("every command: --name=VALUE reads as --name VALUE") {
  namespace cli = tg::cli;
  const auto [ta, tb] = parse_both({"train", "--epochs", "3", "--lr", "0.5", "--attention", "book"},
                                   {"train", "--epochs=3", "--lr=0.5", "--attention=book"},
                                   [](int argc, char** argv) {
                                     bool help = false;
                                     return cli::parse_train_args(argc, argv, help);
                                   });
  CHECK(tg::train::options_json(ta) == tg::train::options_json(tb));
  CHECK(ta.explicit_flags == tb.explicit_flags);
  const auto [ga, gb] = parse_both(
      {"generate", "--checkpoint", "c", "--temperature", "0.5", "--top-k", "4"},
      {"generate", "--checkpoint=c", "--temperature=0.5", "--top-k=4"}, cli::parse_generate_args);
  CHECK((ga.checkpoint == gb.checkpoint && ga.temperature == gb.temperature && ga.top_k == 4 &&
         gb.top_k == 4));
  const auto [ca, cb] =
      parse_both({"chapter3", "--notebook", "mha", "--cell", "5"},
                 {"chapter3", "--notebook=mha", "--cell=5"}, cli::parse_chapter3_args);
  CHECK((ca.notebook == "mha" && cb.notebook == "mha" && ca.only == 5 && cb.only == 5));
  const auto [ka, kb] =
      parse_both({"tokenize", "--encoding", "gpt2", "f"}, {"tokenize", "--encoding=gpt2", "f"},
                 tg::data::parse_tokenize_args);
  CHECK((ka.encoding == "gpt2" && kb.encoding == "gpt2"));
  const auto [ba, bb] =
      parse_both({"bpe-train", "--vocab-size", "300", "-o", "v", "--special", "<|x|>", "t"},
                 {"bpe-train", "--vocab-size=300", "--output=v", "--special=<|x|>", "t"},
                 tg::data::parse_bpe_train_args);
  CHECK((ba.vocab_size == 300 && bb.vocab_size == 300 && ba.output == bb.output &&
         ba.specials == bb.specials));
}

TEST_CASE("bad input table: tapegrad train, numbers out of range or malformed") {
  check_table({
      {{"train", "--context", "0"}, 2, "--context expects an integer from 2 to 1048576, got '0'"},
      {{"train", "--context", "-3"}, 2, "--context expects an integer from 2 to 1048576, got '-3'"},
      {{"train", "--max-steps", "-1"},
       2,
       "--max-steps expects an integer from 1 to 1099511627776, got '-1'"},
      {{"train", "--min-lr", "-1"}, 2, "--min-lr expects a number >= 0, got '-1'"},
      {{"train", "--min-lr", "nan"}, 2, "--min-lr expects a number >= 0, got 'nan'"},
      {{"train", "--epochs", "4611686018427387904", "--cosine"},
       2,
       "--epochs expects an integer from 0 to 1000000, got '4611686018427387904'"},
      {{"train", "--epochs", "-1"}, 2, "--epochs expects an integer from 0 to 1000000, got '-1'"},
      {{"train", "--sample-tokens", "99999999999"},
       2,
       "--sample-tokens expects an integer from 0 to 100000, got '99999999999'"},
      {{"train", "--epochs", "ten"}, 2, "--epochs expects an integer from 0 to 1000000, got 'ten'"},
      {{"train", "--epochs", "99999999999999999999"},
       2,
       "--epochs expects an integer from 0 to 1000000, got '99999999999999999999'"},
      {{"train", "--lr", "abc"}, 2, "--lr expects a number >= 0, got 'abc'"},
      {{"train", "--lr", "nan"}, 2, "--lr expects a number >= 0, got 'nan'"},
      {{"train", "--lr", "inf"}, 2, "--lr expects a number >= 0, got 'inf'"},
      {{"train", "--threads", "0"}, 2, "--threads expects an integer from 1 to 1024, got '0'"},
      {{"train", "--seed", "-1"}, 2, "--seed expects an integer >= 0, got '-1'"},
      {{"train", "--batch-size", "0"},
       2,
       "--batch-size expects an integer from 1 to 1048576, got '0'"},
      {{"train", "--eval-freq", "0"},
       2,
       "--eval-freq expects an integer from 1 to 1099511627776, got '0'"},
      {{"train", "--warmup-steps", "-5"},
       2,
       "--warmup-steps expects an integer from 0 to 1099511627776, got '-5'"},
      {{"train", "--clip-grad", "-1"}, 2, "--clip-grad expects a number >= 0, got '-1'"},
      {{"train", "--drop-rate", "1"}, 2, "--drop-rate expects a number in [0, 1), got '1'"},
      {{"train", "--drop-rate=-0.1"}, 2, "--drop-rate expects a number in [0, 1), got '-0.1'"},
      {{"train", "--micro-batches", "-1"},
       2,
       "--micro-batches expects an integer from 1 to 1048576, got '-1'"},
      {{"train", "--pad-vocab", "0"}, 2, "--pad-vocab expects an integer from 1 to 65536, got '0'"},
      {{"train", "--pad-vocab", "-64"},
       2,
       "--pad-vocab expects an integer from 1 to 65536, got '-64'"},
      {{"train", "--pad-vocab", "sixty"},
       2,
       "--pad-vocab expects an integer from 1 to 65536, got 'sixty'"},
      {{"train", "--pad-vocab", "64.0"},
       2,
       "--pad-vocab expects an integer from 1 to 65536, got '64.0'"},
      {{"train", "--pad-vocab", "65537"},
       2,
       "--pad-vocab expects an integer from 1 to 65536, got '65537'"},
      {{"train", "--micro-batches", "3", "--batch-size", "4"},
       2,
       "--batch-size 4 does not split into 3 micro-batches"},
      {{"train", "--micro-batches", "5", "--batch-size", "4"},
       2,
       "--batch-size 4 does not split into 5 micro-batches"},
  });
}

TEST_CASE("bad input table: tapegrad train, flags empty, repeated, unknown or contradicting") {
  check_table({
      {{"train", "--text", ""}, 2, "--text is empty"},
      {{"train", "--out", ""}, 2, "--out is empty"},
      {{"train", "--start-context", ""}, 2, "--start-context is empty"},
      {{"train", "--lr", "1", "--lr", "2"}, 2, "--lr is given twice"},
      {{"train", "--cosine", "--cosine"}, 2, "--cosine is given twice"},
      {{"train", "--epochs=2", "--epochs", "3"}, 2, "--epochs is given twice"},
      {{"train", "--lr"}, 2, "--lr needs a value"},
      {{"train", "--epochs", "--lr", "1"}, 2, "--epochs needs a value, got the option --lr"},
      {{"train", "--text", "--out=o"}, 2, "--text needs a value, got the option --out"},
      {{"train", "--help=1"}, 2, "--help takes no value"},
      {{"train", "--out", "a\nb"}, 2, "--out 'a\\x0ab' has a line break"},
      {{"train", "--log=l\r"}, 2, "--log 'l\\x0d' has a line break"},
      {{"train", "--cosine=1"}, 2, "--cosine takes no value"},
      {{"train", "--frobnicate"}, 2, "unknown option '--frobnicate' (try --help)"},
      {{"train", "--pad-vocab", "64", "--pad-vocab", "128"}, 2, "--pad-vocab is given twice"},
      // Generation reads a checkpoint, always unpadded; one row at a time, padding gains nothing.
      {{"generate", "--checkpoint", "c", "--pad-vocab", "64"},
       2,
       "unknown option '--pad-vocab' (try --help)"},
      {{"train", "extra"}, 2, "unexpected argument 'extra' (try --help)"},
      {{"train", "--attention", "flash"}, 2, "--attention expects fused or book, got 'flash'"},
      {{"train", "--tokenizer", "bpe:abc"},
       2,
       "--tokenizer names an unknown tokenizer 'bpe:abc' (known: gpt2, bpe:N with 256 <= N <= "
       "100000)"},
      {{"train", "--tokenizer", "bpe:100"},
       2,
       "--tokenizer names an unknown tokenizer 'bpe:100' (known: gpt2, bpe:N with 256 <= N <= "
       "100000)"},
      {{"train", "--preset", "gpt9"},
       2,
       "--preset names an unknown preset 'gpt9' (known: gpt2-124m, tiny)"},
      {{"train", "--preset", "custom"},
       2,
       "--preset names an unknown preset 'custom' (known: gpt2-124m, tiny)"},
      {{"train", "--progress", "--no-progress"},
       2,
       "--progress and --no-progress contradict each other"},
      {{"train", "--resume", "x", "--overwrite"},
       2,
       "--overwrite starts afresh; it does not go with --resume"},
      {{"train", "--init-from", "a", "--resume", "b"},
       2,
       "--init-from starts a run from GPT-2's weights; it does not go with --resume"},
  });
}

TEST_CASE("bad input table: tapegrad train, inputs that cannot be read or used") {
  check_table({
      {{"train", "--text", "{d}/missing.txt", "--out", "{d}/o"},
       1,
       "cannot read text file {d}/missing.txt: no such file"},
      {{"train", "--text", "{d}/emptydir", "--out", "{d}/o"},
       1,
       "cannot read text file {d}/emptydir: is a directory, not a file"},
      {{"train", "--text", "/dev/zero", "--out", "{d}/o"},
       1,
       "cannot read text file /dev/zero" + kNotRegular + "text file"},
      {{"train", "--text", "{d}/fifo", "--out", "{d}/o"},
       1,
       "cannot read text file {d}/fifo" + kNotRegular + "text file"},
      {{"train", "--text", "{d}/empty.txt", "--out", "{d}/o"},
       1,
       "text file '{d}/empty.txt' is empty"},
      {{"train", "--resume", "{d}/none"}, 1, "{d}/none: no checkpoint to resume from"},
      {{"train", "--resume", "{d}/junk"},
       1,
       "{d}/junk: not a valid safetensors file (shorter than 8 bytes)"},
      {{"train", "--resume", "/dev/zero"}, 1, "/dev/zero" + kNotRegular + "safetensors file"},
      {{"train", "--text", "{d}/aaaa", "--tokenizer", "bpe:300", "--out", "{d}/o"}, 1, kLongMerge},
      {{"train", "--init-from", "{d}/none", "--out", "{d}/o"},
       1,
       "{d}/none: not a directory (expected config.json and model.safetensors in it)"},
  });
}

TEST_CASE("bad input table: tapegrad train, outputs that clobber or cannot be written") {
  check_table({
      {{"train", "--out", "{d}/ck"},
       2,
       "--out {d}/ck already holds a checkpoint; continue it with --resume {d}/ck, or replace it "
       "with --overwrite"},
      {{"train", "--log", "{d}/fifo", "--out", "{d}/o"},
       1,
       "cannot write log file '{d}/fifo' (not a regular file)"},
      {{"train", "--log", "{d}/emptydir", "--out", "{d}/o"},
       1,
       "cannot write log file '{d}/emptydir' (Is a directory)"},
      // Outputs that are inputs or each other (issue 23), refused before anything is written.
      {{"train", "--text", "{d}/junk", "--log", "{d}/junk", "--out", "{d}/o"},
       2,
       "--log {d}/junk is the same file as --text {d}/junk" + kClobber},
      {{"train", "--text", "{d}/link", "--log", "{d}/junk", "--out", "{d}/o"},
       2,
       "--log {d}/junk is the same file as --text {d}/link" + kClobber},
      {{"train", "--text", "{d}/junk", "--log", "{d}/o/checkpoint.safetensors", "--out", "{d}/o"},
       2,
       "--log {d}/o/checkpoint.safetensors is the same file as the checkpoint "
       "{d}/o/checkpoint.safetensors" +
           kClobber},
      {{"train", "--text", "{d}/junk", "--log", "{d}/o/../o/loss.svg", "--out", "{d}/o"},
       2,
       "--log {d}/o/../o/loss.svg is the same file as the plot {d}/o/loss.svg" + kClobber},
      {{"train", "--text", "{d}/ck/checkpoint.safetensors", "--out", "{d}/ck", "--overwrite"},
       2,
       "the checkpoint {d}/ck/checkpoint.safetensors is the same file as --text "
       "{d}/ck/checkpoint.safetensors" +
           kClobber},
      // Outputs that cannot be written are found before training (issue 23).
      {{"train", "--out", "/proc"}, 1, "--out /proc: cannot write (No such file or directory)"},
      {{"train", "--out", "{d}/junk/sub", "--text", "{d}/aaaa"},
       1,
       "cannot create output directory '{d}/junk/sub' (Not a directory)"},
      {{"train", "--out", "{d}/ck2", "--overwrite", "--text", "{d}/junk"},
       1,
       "{d}/ck2/checkpoint.safetensors: is a directory, not a file"},
      {{"train", "--out", "{d}/o3", "--text", "{d}/junk"},
       1,
       "{d}/o3/loss.svg: not a regular file (a FIFO, device or socket); only a regular file is "
       "replaced"},
  });
}

TEST_CASE("bad input table: tapegrad generate") {
  check_table({
      {{"generate"}, 2, "--checkpoint DIR or --gpt2 DIR is required"},
      {{"generate", "--checkpoint", "a", "--gpt2", "b"},
       2,
       "--checkpoint and --gpt2 both name a model; give one"},
      {{"generate", "--gpt2", ""}, 2, "--gpt2 is empty"},
      {{"generate", "--gpt2", "{d}/none"},
       1,
       "{d}/none: not a directory (expected config.json and model.safetensors in it)"},
      {{"generate", "--gpt2", "c", "--stream=1"}, 2, "--stream takes no value"},
      {{"generate", "--checkpoint", ""}, 2, "--checkpoint is empty"},
      {{"generate", "--checkpoint", "a", "--checkpoint", "b"}, 2, "--checkpoint is given twice"},
      {{"generate", "--checkpoint", "c", "--temperature", "inf"},
       2,
       "--temperature expects 0 (greedy) or a number from 0.001 to 1000, got 'inf'"},
      {{"generate", "--checkpoint", "c", "--temperature", "1e-45"},
       2,
       "--temperature expects 0 (greedy) or a number from 0.001 to 1000, got '1e-45'"},
      {{"generate", "--checkpoint", "c", "--temperature", "-1"},
       2,
       "--temperature expects 0 (greedy) or a number from 0.001 to 1000, got '-1'"},
      {{"generate", "--checkpoint", "c", "--temperature", "nan"},
       2,
       "--temperature expects 0 (greedy) or a number from 0.001 to 1000, got 'nan'"},
      {{"generate", "--checkpoint", "c", "--max-new-tokens", "99999999999999"},
       2,
       "--max-new-tokens expects an integer from 0 to 100000, got '99999999999999'"},
      {{"generate", "--checkpoint", "c", "--max-new-tokens", "-1"},
       2,
       "--max-new-tokens expects an integer from 0 to 100000, got '-1'"},
      {{"generate", "--checkpoint", "c", "--top-k", "-1"},
       2,
       "--top-k expects an integer >= 0, got '-1'"},
      {{"generate", "--checkpoint", "c", "--seed", "-5"},
       2,
       "--seed expects an integer >= 0, got '-5'"},
      {{"generate", "--checkpoint", "c", "--prompt", ""}, 2, "--prompt is empty"},
      {{"generate", "--checkpoint", "c", "--eos=1"}, 2, "--eos takes no value"},
      {{"generate", "--checkpoint", "c", "--precision", "fp16"},
       2,
       "--precision expects fp32 or bf16, got 'fp16'"},
      {{"generate", "--checkpoint", "c", "--precision=BF16"},
       2,
       "--precision expects fp32 or bf16, got 'BF16'"},
      {{"generate", "--checkpoint", "c", "--precision"}, 2, "--precision needs a value"},
      {{"generate", "--checkpoint", "c", "--threads", "2000"},
       2,
       "--threads expects an integer from 1 to 1024, got '2000'"},
      {{"generate", "--checkpoint", "{d}/none"}, 1, "{d}/none: no such checkpoint"},
      {{"generate", "--checkpoint", "{d}/emptydir"},
       1,
       "{d}/emptydir/checkpoint.safetensors: no such checkpoint"},
      {{"generate", "--checkpoint", "{d}/junk"},
       1,
       "{d}/junk: not a valid safetensors file (shorter than 8 bytes)"},
      {{"generate", "--checkpoint", "/dev/zero"},
       1,
       "/dev/zero" + kNotRegular + "safetensors file"},
      {{"generate", "--checkpoint", "{d}/fifo"}, 1, "{d}/fifo" + kNotRegular + "safetensors file"},
      {{"generate", "--checkpoint", "{d}/ck", "--logits", "{d}/ck/checkpoint.safetensors"},
       2,
       "--logits {d}/ck/checkpoint.safetensors is the same file as --checkpoint "
       "{d}/ck/checkpoint.safetensors" +
           kClobber},
      {{"generate", "--checkpoint", "{d}/ck/checkpoint.safetensors", "--logits",
        "{d}/ck/./checkpoint.safetensors"},
       2,
       "--logits {d}/ck/./checkpoint.safetensors is the same file as --checkpoint "
       "{d}/ck/checkpoint.safetensors" +
           kClobber},
  });
}

TEST_CASE("bad input table: tapegrad tokenize, bpe-train and chapter3") {
  check_table({
      {{"tokenize", "--decode", "--decode"}, 2, "--decode is given twice"},
      {{"tokenize", "--encoding", "gpt2", "--encoding", "gpt2"}, 2, "--encoding is given twice"},
      {{"tokenize", "--encoding", ""}, 2, "--encoding is empty"},
      {{"tokenize", "--tokenizer", ""}, 2, "--tokenizer is empty"},
      {{"tokenize", ""}, 2, "empty input file name"},
      {{"tokenize", "/dev/zero"}, 1, "/dev/zero" + kNotRegular + "text file"},
      {{"tokenize", "{d}/fifo"}, 1, "{d}/fifo" + kNotRegular + "text file"},
      {{"tokenize", "{d}/emptydir"}, 1, "{d}/emptydir: is a directory, not a file"},
      {{"tokenize", "--tokenizer", "/dev/zero"}, 1, "/dev/zero" + kNotRegular + "vocabulary file"},
      {{"tokenize", "--tokenizer", "{d}/emptydir"}, 1, "{d}/emptydir: is a directory, not a file"},
      {{"tokenize", "--tokenizer", "{d}/fifo"}, 1, "{d}/fifo" + kNotRegular + "vocabulary file"},
      {{"bpe-train", "--vocab-size", "300", "-o", "x", "--special", "a\nb", "t"},
       2,
       "--special 'a\\x0ab' contains a line break"},
      {{"bpe-train", "--vocab-size", "300", "-o", "x", "--special", "<|a|>", "--special", "<|a|>",
        "t"},
       2,
       "--special '<|a|>' is given twice"},
      {{"bpe-train", "--vocab-size", "300", "--vocab-size", "300", "-o", "x", "t"},
       2,
       "--vocab-size is given twice"},
      {{"bpe-train", "--vocab-size", "300", "-o", "x", "--output", "y", "t"},
       2,
       "-o is given twice"},
      {{"bpe-train", "--vocab-size", "300", "-o", "", "t"}, 2, "-o is empty"},
      {{"bpe-train", "--vocab-size", "300", "-o", "{d}/v", "/dev/zero"},
       1,
       "/dev/zero" + kNotRegular + "text file"},
      {{"bpe-train", "--vocab-size", "300", "-o", "{d}/v", "{d}/fifo"},
       1,
       "{d}/fifo" + kNotRegular + "text file"},
      {{"bpe-train", "--vocab-size", "300", "-o", "{d}/v", "{d}/emptydir"},
       1,
       "{d}/emptydir: is a directory, not a file"},
      // The output is a FIFO or a directory: refused, never renamed over.
      {{"bpe-train", "--vocab-size", "300", "-o", "{d}/fifo", "{d}/junk"},
       1,
       "{d}/fifo: not a regular file (a FIFO, device or socket); only a regular file is replaced"},
      {{"bpe-train", "--vocab-size", "300", "-o", "{d}/emptydir", "{d}/junk"},
       1,
       "{d}/emptydir: is a directory, not a file"},
      {{"bpe-train", "--vocab-size", "300", "-o", "{d}/junk", "{d}/junk"},
       2,
       "-o {d}/junk is the same file as the text {d}/junk" + kClobber},
      {{"bpe-train", "--vocab-size", "300", "-o", "{d}/link", "{d}/junk"},
       2,
       "-o {d}/link is the same file as the text {d}/junk" + kClobber},
      {{"bpe-train", "--vocab-size", "300", "-o", "{d}/v", "{d}/aaaa"}, 1, kLongMerge},
      {{"chapter3", "--cell", "99"}, 2, "--cell expects an integer from 2 to 38, got '99'"},
      {{"chapter3", "--cell", ""}, 2, "--cell expects an integer from 2 to 38, got ''"},
      {{"chapter3", "--cell"}, 2, "--cell needs a value"},
      {{"chapter3", "--cell", "3", "--cell", "4"}, 2, "--cell is given twice"},
      {{"chapter3", "--cell=39"}, 2, "--cell expects an integer from 2 to 38, got '39'"},
      {{"chapter3", "--cell= 5"}, 2, "--cell expects an integer from 2 to 38, got ' 5'"},
      {{"chapter3", "--cell", "+5"}, 2, "--cell expects an integer from 2 to 38, got '+5'"},
      {{"chapter3", "--bogus=1"}, 2, "unknown option '--bogus' (try --help)"},
      {{"chapter3", "--cell=3", "--cell", "4"}, 2, "--cell is given twice"},
      {{"chapter3", "--notebook", "ch04"}, 2, "--notebook expects ch03 or mha, got 'ch04'"},
      {{"chapter3", "--bogus"}, 2, "unknown option '--bogus' (try --help)"},
  });
}
