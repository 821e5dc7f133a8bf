// Bad input never crashes, hangs or passes silently (issue 16), one test per kind of bad file:
// crafted safetensors files and checkpoints (sizes that overflow, offsets that do not tile the
// data, duplicate keys, unknown tensors, configs that do not match the tensors, corrupt training
// state and stored options, NaN weights), lost output, an overwritten checkpoint.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "app/commands.h"
#include "core/file_io.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "nn/gpt.h"
#include "tests/temp_dir.h"
#include "tests/train_testing.h"
#include "train/session.h"
#include "train/trainer.h"

using namespace tg;
namespace fs = std::filesystem;

namespace {

using Dir = tg::testing::TempDir;
using tg::DirLock;

using tg::testing::slurp;
using tg::testing::spit;

// A safetensors file as its header text and data bytes, to be spliced and put back together.
struct Raw {
  std::string header, data;
  static Raw of(const std::string& bytes) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
    return {bytes.substr(8, n), bytes.substr(8 + n)};
  }
  std::string bytes(int64_t header_len_delta = 0) const {
    const uint64_t n = header.size() + uint64_t(header_len_delta);
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = char((n >> (8 * i)) & 0xFF);
    return out + header + data;
  }
  void replace(const std::string& from, const std::string& to) {
    const size_t at = header.find(from);
    REQUIRE_MESSAGE(at != std::string::npos, from);
    header.replace(at, from.size(), to);
  }
};

// A short run of the small GPT of test_train (2 layers, emb 32, context 16, raw bytes) into
// d/name: one epoch, or (mid_epoch) one step, so the checkpoint holds trainer.epoch_order.
train::TrainOptions small_run(const Dir& d, const std::string& name, bool mid_epoch) {
  train::TrainOptions o;
  o.text_path = std::string(TG_GOLDEN_DIR) + "/train_text.txt";
  o.config = testing::small_config();
  o.tokenizer = "bpe:256";
  o.epochs = 1;
  o.batch_size = 4;
  o.eval_freq = 100;
  o.eval_iter = 1;
  o.sample_tokens = 1;
  o.start_context = "The ";
  o.out_dir = d / name;
  o.progress = 0;
  if (mid_epoch) o.max_steps = 1;
  return o;
}

std::string make_checkpoint(const Dir& d, const std::string& name, bool mid_epoch) {
  const train::TrainOptions o = small_run(d, name, mid_epoch);
  std::ostringstream out, err;
  train::run_training(o, out, err);
  return o.out_dir;
}

struct Result {
  int rc;
  std::string out, err;
};
Result run(int (*fn)(int, char**), std::vector<std::string> args,
           std::streambuf* out_buf = nullptr) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::ostringstream out, err;
  auto* old_out = std::cout.rdbuf(out_buf ? out_buf : out.rdbuf());
  auto* old_err = std::cerr.rdbuf(err.rdbuf());
  const int rc = fn(int(argv.size()), argv.data());
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  std::cout.clear();
  return {rc, out.str(), err.str()};
}

// The command failed with status 1 and one error line on stderr, "tapegrad CMD: " + a message
// containing `needle` (the file's path is part of it); only informational lines ("resuming ...")
// may precede it.
void check_refused(const Result& r, const std::string& cmd, const std::string& needle) {
  INFO("stderr: ", r.err);
  CHECK(r.rc == 1);
  REQUIRE(!r.err.empty());
  CHECK(r.err.back() == '\n');
  const size_t last = r.err.rfind('\n', r.err.size() - 2) + 1;  // 0 when there is one line
  CHECK(r.err.rfind("tapegrad " + cmd + ": ", last) == last);
  CHECK(r.err.find("tapegrad ") == last);
  CHECK(r.err.find(needle, last) != std::string::npos);
}

// generate on a checkpoint file whose bytes are `bytes`.
Result generate_on(const Dir& d, const std::string& bytes) {
  const std::string path = d / "crafted.safetensors";
  spit(path, bytes);
  return run(cli::generate_main, {"generate", "--checkpoint", path, "--max-new-tokens", "2"});
}

// train --resume on a copy of `dir`'s checkpoint with metadata[key] = value ("" removes key).
Result resume_with(const Dir& d, const std::string& from, const std::string& key,
                   const std::string& value) {
  tg::SafeTensors st = tg::load_safetensors(from + "/checkpoint.safetensors");
  if (value.empty())
    st.metadata.erase(key);
  else
    st.metadata[key] = value;
  const std::string dir = d / ("resume-" + key);
  fs::create_directories(dir);
  tg::save_safetensors(dir + "/checkpoint.safetensors", st.tensors, st.metadata);
  return run(cli::train_main, {"train", "--resume", dir, "--epochs", "2", "--no-progress"});
}

// The stored options JSON with one field's text replaced.
std::string options_with(const std::string& from, const std::string& field,
                         const std::string& value) {
  const tg::SafeTensors st = tg::load_safetensors(from + "/checkpoint.safetensors");
  std::string o = st.metadata.at("options");
  const size_t at = o.find("\"" + field + "\": ");
  REQUIRE(at != std::string::npos);
  const size_t begin = at + field.size() + 4;
  const size_t end = o.find_first_of(",}", o[begin] == '"' ? o.find('"', begin + 1) : begin);
  return o.replace(begin, end - begin, value);
}

// A checkpoint entry edited to `value`, and a piece of the one-line refusal it must get.
struct BadEntry {
  std::string key, value, needle;
};

// The training state: resume_with sets metadata[key] = value ("" removes the key).
std::vector<BadEntry> bad_training_state() {
  return {
      {"optimizer_step", "abc", "checkpoint's 'optimizer_step' is not an integer: 'abc'"},
      {"global_step", "99999999999999999999",
       "checkpoint's 'global_step' is not an integer: '99999999999999999999'"},
      {"rng_state", "", "checkpoint training state lacks 'rng_state'"},
      {"rng_state", "abcd", "checkpoint's rng_state is not a generator state"},
      {"seconds", "nan", "checkpoint's 'seconds' is not a number >= 0: 'nan'"},
      {"history", "{}", "checkpoint's 'history' is not a list"},
      // Counters checked against each other and the run's options (issue 23).
      {"epoch", "1000000000",
       "checkpoint's 'epoch' is 1000000000, past the 1 epochs of the run that wrote it"},
      {"global_step", "1000000000000000",
       "checkpoint's 'global_step' is 1000000000000000, but epoch 1 and batch 0 of 30 per epoch "
       "make it 29"},
      {"optimizer_step", "0", "checkpoint's 'optimizer_step' is 0, but global_step 29 makes it 30"},
      {"optimizer_step", "4611686018427387904",
       "checkpoint's 'optimizer_step' is 4611686018427387904, but global_step 29 makes it 30"},
      {"tokens_seen", "1921",
       "checkpoint's 'tokens_seen' is 1921, but 30 steps of 64 tokens make it 1920"},
      {"history", "[{\"epoch\": 1, \"step\": 99, \"tokens_seen\": 0}]",
       "checkpoint's history has an evaluation at step 99, epoch 1, after the checkpoint's step 29 "
       "(epoch 1)"},
      // Each fact once: a second copy (checkpoints before issue 23) must agree with the first.
      {"tokenizer", "gpt2",
       "checkpoint's metadata 'tokenizer' is 'gpt2' but its options say 'bpe:256' (an edited "
       "checkpoint; one of them is wrong)"},
      {"preset", "tiny",
       "checkpoint's metadata 'preset' is 'tiny' but its options say 'custom' (an edited "
       "checkpoint; one of them is wrong)"},
      {"step", "7", "checkpoint's 'step' is '7' but its optimizer_step is 30"},
  };
}

// The stored options: options_with puts `value` in place of the field's text in the options
// JSON; `resumed` is the folder resume_with copies the checkpoint to.
std::vector<BadEntry> bad_stored_options(const std::string& resumed) {
  const std::string ckpt = resumed + "/checkpoint.safetensors";
  return {
      {"lr", "\"nan\"", "checkpoint option 'lr' expects a number >= 0, got \"nan\""},
      {"lr", "null", "checkpoint option 'lr' expects a number >= 0, got null"},
      {"seed", "-1", "checkpoint option 'seed' expects an integer >= 0, got -1"},
      {"context_length", "0",
       ckpt + ": checkpoint option 'context_length' expects an integer from 2 to 1048576, got 0"},
      {"preset", "\"gpt9\"",
       resumed + ": checkpoint option 'preset' names an unknown preset 'gpt9'"},
      {"tokenizer", "\"bpe:abc\"",
       resumed + ": checkpoint option 'tokenizer' names an unknown tokenizer"},
      {"min_lr", "-1", ckpt + ": checkpoint option 'min_lr' expects a number >= 0, got -1"},
      {"epochs", "1.5", "checkpoint option 'epochs' expects an integer from 0 to 1000000, got 1.5"},
      {"cosine", "0", "checkpoint option 'cosine' expects true or false, got 0"},
      {"attention", "\"flash\"",
       "checkpoint option 'attention' expects fused or book, got \"flash\""},
      // A relative --text is relative to where the run that wrote the checkpoint started.
      {"text", "\"rel/none.txt\"",
       "cannot read text file rel/none.txt: no such file (the --text stored in " + resumed +
           "/checkpoint.safetensors, relative to the folder that run started in; give --text)"},
  };
}

}  // namespace

TEST_CASE("bad safetensors: sizes that overflow and offsets that do not tile the data") {
  Dir d;
  const std::string ck = make_checkpoint(d, "ck", false) + "/checkpoint.safetensors";
  const std::string good = slurp(ck);
  REQUIRE(generate_on(d, good).rc == 0);  // the unmodified file loads

  SUBCASE("an element count past int64 (tokenizer.merges [2^60 + 256, 2])") {
    Raw r = Raw::of(good);
    r.replace("\"shape\":[0,2]", "\"shape\":[1152921504606847232,2]");
    check_refused(generate_on(d, r.bytes()), "generate",
                  "entry 'tokenizer.merges': element count overflows int64");
  }
  SUBCASE("one byte inserted into the data") {
    Raw r = Raw::of(good);
    r.data.insert(r.data.begin() + 100, 'x');
    check_refused(generate_on(d, r.bytes()), "generate",
                  "not a valid safetensors file (the tensors cover " +
                      std::to_string(r.data.size() - 1) + " bytes of a data region of " +
                      std::to_string(r.data.size()) + ")");
  }
  SUBCASE("trailing bytes after the last tensor") {
    Raw r = Raw::of(good);
    r.data += "garbage";
    check_refused(generate_on(d, r.bytes()), "generate", "the tensors cover");
  }
  SUBCASE("a header length off by a few bytes") {
    const Raw r = Raw::of(good);
    check_refused(generate_on(d, r.bytes(+3)), "generate", "not a valid safetensors file (header");
    // 3 bytes fewer: the header's padding spaces become data, which no tensor covers.
    check_refused(generate_on(d, r.bytes(-3)), "generate", "not a valid safetensors file (");
    check_refused(generate_on(d, r.bytes(-13)), "generate", "not a valid safetensors file (");
  }
  SUBCASE("a duplicate key in the header") {
    Raw r = Raw::of(good);
    r.replace("{", "{\"pos_emb.weight\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},");
    check_refused(generate_on(d, r.bytes()), "generate", "duplicate key 'pos_emb.weight'");
  }
  SUBCASE("a NUL in a tensor name: the message names it whole, escaped") {
    Raw r = Raw::of(good);
    r.replace("{", "{\"tok\\u0000emb\":{\"dtype\":\"Q4\",\"shape\":[0],\"data_offsets\":[0,0]},");
    check_refused(generate_on(d, r.bytes()), "generate",
                  "entry 'tok\\x00emb' has unsupported dtype Q4");
  }
  SUBCASE("garbage after the header's JSON, inside its length") {
    Raw r = Raw::of(good);
    r.header += "!";
    check_refused(generate_on(d, r.bytes()), "generate", "unexpected '!' after the value");
  }
  SUBCASE("a header that does not start with '{'") {
    Raw r = Raw::of(good);
    r.header = " " + r.header.substr(0, r.header.size() - 1);
    check_refused(generate_on(d, r.bytes()), "generate", "header does not start with '{'");
  }
  SUBCASE("overlapping tensors and a hole, in a hand-made file") {
    const std::string f = d / "x.safetensors";
    const std::string four(16, '\1');
    Raw r{
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
        four.substr(0, 12)};
    spit(f, r.bytes());
    CHECK_THROWS_WITH(tg::load_safetensors(f),
                      doctest::Contains("entry 'b' starts at byte 4, not 8 (overlaps another)"));
    r.replace("[4,12]", "[12,20]");
    r.data = four + "1234";
    spit(f, r.bytes());
    CHECK_THROWS_WITH(tg::load_safetensors(f),
                      doctest::Contains("entry 'b' starts at byte 12, not 8 (a hole before it)"));
    r.replace("[12,20]", "[8,16]");
    r.data = four;
    spit(f, r.bytes());
    CHECK(tg::load_safetensors(f).tensors.size() == 2);  // the same file, tiled: loads
  }
}

TEST_CASE("bad checkpoints: tensors and configs that do not belong together") {
  Dir d;
  const std::string dir = make_checkpoint(d, "ck", false);
  const std::string ck = dir + "/checkpoint.safetensors";
  auto with_config = [&](const std::string& from, const std::string& to) {
    tg::SafeTensors st = tg::load_safetensors(ck);
    std::string& c = st.metadata.at("config");
    const size_t at = c.find(from);
    REQUIRE(at != std::string::npos);
    c.replace(at, from.size(), to);
    tg::save_safetensors(d / "c.safetensors", st.tensors, st.metadata);
    return slurp(d / "c.safetensors");
  };
  check_refused(generate_on(d, with_config("\"n_layers\": 2", "\"n_layers\": 4294967298")),
                "generate", "GPT config: n_layers must be <= 1024, got 4294967298");
  check_refused(
      generate_on(d, with_config("\"context_length\": 16", "\"context_length\": 1000000000000")),
      "generate", "GPT config: context_length must be <= 1048576, got 1000000000000");
  // Stated 1 layer, 2 stored: generate is as strict as --resume.
  check_refused(generate_on(d, with_config("\"n_layers\": 2", "\"n_layers\": 1")), "generate",
                "the checkpoint's config says n_layers 1 but it stores 2 blocks");
  check_refused(generate_on(d, with_config("\"n_layers\": 2", "\"n_layers\": 3")), "generate",
                "the checkpoint's config says n_layers 3 but it stores 2 blocks");
  check_refused(generate_on(d, with_config("\"context_length\": 16", "\"context_length\": 8")),
                "generate",
                "'pos_emb.weight' is [16, 32] but the checkpoint's config needs [8, 32]");
  check_refused(generate_on(d, with_config("\"emb_dim\": 32", "\"emb_dim\": 32, \"emb_dim\": 32")),
                "generate", "duplicate key 'emb_dim'");
  check_refused(generate_on(d, with_config("\"qkv_bias\": false}", "\"qkv_bias\": false} junk")),
                "generate", "unexpected 'j' after the value");

  tg::SafeTensors st = tg::load_safetensors(ck);
  SUBCASE("an unknown extra tensor") {
    st.tensors.emplace_back("extra.weight", zeros({2}));
    tg::save_safetensors(d / "x.safetensors", st.tensors, st.metadata);
    check_refused(generate_on(d, slurp(d / "x.safetensors")), "generate",
                  "unexpected tensor 'extra.weight' (not part of this model)");
  }
  SUBCASE("a NaN among the weights") {
    for (auto& [name, t] : st.tensors)
      if (name == "trf_blocks.1.ff.layers.0.weight") t.data<float>()[3] = std::nanf("");
    tg::save_safetensors(d / "x.safetensors", st.tensors, st.metadata);
    check_refused(generate_on(d, slurp(d / "x.safetensors")), "generate",
                  "'trf_blocks.1.ff.layers.0.weight' holds NaN or infinite values");
  }
  SUBCASE("a merge id past 2^31 is not cut to int") {
    for (auto& [name, t] : st.tensors)
      if (name == "tokenizer.merges")
        t = from_vector(std::vector<int64_t>{(int64_t(1) << 32) + 97, 97}, {1, 2});
    tg::save_safetensors(d / "x.safetensors", st.tensors, st.metadata);
    check_refused(generate_on(d, slurp(d / "x.safetensors")), "generate",
                  "tokenizer.merges row 0 uses an id outside 0..255");
  }
}

TEST_CASE("bad training state: each field named, stored options checked like flags") {
  Dir d;
  const std::string dir = make_checkpoint(d, "ck", false);
  for (const BadEntry& b : bad_training_state())
    check_refused(resume_with(d, dir, b.key, b.value), "train", b.needle);
  // A new checkpoint holds preset, tokenizer and the step count once; one from before, with the
  // copies agreeing, still resumes.
  const tg::SafeTensors fresh = tg::load_safetensors(dir + "/checkpoint.safetensors");
  for (const char* key : {"preset", "tokenizer", "step"}) CHECK(fresh.metadata.count(key) == 0);
  CHECK(resume_with(d, dir, "tokenizer", "bpe:256").rc == 0);
  CHECK(resume_with(d, dir, "preset", "custom").rc == 0);
  CHECK(resume_with(d, dir, "step", "30").rc == 0);
  // Stored options: the field's text replaced in the options JSON.
  for (const BadEntry& b : bad_stored_options(d / "resume-options"))
    check_refused(resume_with(d, dir, "options", options_with(dir, b.key, b.value)), "train",
                  b.needle);

  SUBCASE("the interrupted epoch's order must be a permutation") {
    const std::string mid = make_checkpoint(d, "mid", true);
    tg::SafeTensors st = tg::load_safetensors(mid + "/checkpoint.safetensors");
    for (auto& [name, t] : st.tensors)
      if (name == "trainer.epoch_order") t.data<int64_t>()[1] = t.data<int64_t>()[0];
    tg::save_safetensors(mid + "/checkpoint.safetensors", st.tensors, st.metadata);
    check_refused(run(cli::train_main, {"train", "--resume", mid, "--no-progress"}), "train",
                  "checkpoint's trainer.epoch_order is not a permutation of 0..");
  }
}

TEST_CASE("output: a full device fails the command; a checkpoint is never replaced silently") {
  Dir d;
  std::ofstream full("/dev/full");
  REQUIRE(full.is_open());
  const std::string dir = make_checkpoint(d, "ck", false);
  const Result g = run(cli::generate_main,
                       {"generate", "--checkpoint", dir, "--max-new-tokens", "3"}, full.rdbuf());
  check_refused(g, "generate", "cannot write the output to stdout (disk full or pipe closed?)");
  full.clear();
  const Result c = run(cli::chapter3_main, {"chapter3", "--cell", "3"}, full.rdbuf());
  check_refused(c, "chapter3", "cannot write the output to stdout (disk full or pipe closed?)");
  full.clear();
  const Result t =
      run(cli::train_main,
          {"train", "--resume", dir, "--epochs", "2", "--max-steps", "1", "--no-progress"},
          full.rdbuf());
  check_refused(t, "train", "cannot write the output to stdout (disk full or pipe closed?)");
  // `tapegrad help` (app/main.cpp) runs as a program.
  const std::string help = std::string(TG_TAPEGRAD_EXE) + " help > /dev/full 2> /dev/null";
  CHECK(WEXITSTATUS(std::system(help.c_str())) == 1);
  const std::string help_ok = std::string(TG_TAPEGRAD_EXE) + " help > /dev/null";
  CHECK(WEXITSTATUS(std::system(help_ok.c_str())) == 0);

  // A fresh run into a directory holding a checkpoint is refused before any work, and the
  // checkpoint is unchanged; --overwrite replaces it.
  const std::string before = slurp(dir + "/checkpoint.safetensors");
  const Result again = run(cli::train_main, {"train", "--out", dir, "--preset", "tiny"});
  CHECK(again.rc == 2);
  CHECK(again.err == "tapegrad train: --out " + dir + " already holds a checkpoint; continue it " +
                         "with --resume " + dir + ", or replace it with --overwrite\n");
  CHECK(slurp(dir + "/checkpoint.safetensors") == before);
  train::TrainOptions o = small_run(d, "ck", true);
  std::ostringstream out, err;
  CHECK_THROWS_AS(train::run_training(o, out, err), train::UsageError);
  o.overwrite = true;
  CHECK(train::run_training(o, out, err).global_step == 0);
  CHECK(slurp(dir + "/checkpoint.safetensors") != before);
}

namespace {

// `tapegrad train` on the test text as a program in d/name, for as long as it is let run
// (1000 epochs), printing an evaluation every step.
std::string long_train_cmd(const Dir& d, const std::string& name) {
  return std::string(TG_TAPEGRAD_EXE) + " train --text " + TG_GOLDEN_DIR +
         "/train_text.txt --tokenizer bpe:300 --context 16 --batch-size 8 --epochs 1000 "
         "--eval-freq 1 --eval-iter 1 --no-progress --out " +
         (d / name);
}

// The last line of a file (without its newline), and how many lines it has.
std::pair<std::string, int> last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  int n = 0;
  while (std::getline(in, line)) last = line, ++n;
  return {last, n};
}

// Runs `cmd` (sh -c) with stdout a pipe whose reader is gone; its exit status, or -signal.
int with_stdout_closed(const std::string& cmd) {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  ::close(p[0]);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(p[1], 1);
    ::signal(SIGPIPE, SIG_DFL);  // as a shell starts it
    ::execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(p[1]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

}  // namespace

TEST_CASE("SIGTERM saves at the step's end like Ctrl-C and exits 143") {
  Dir d;
  int out_pipe[2];
  REQUIRE(::pipe(out_pipe) == 0);
  const std::string err_path = d / "err";
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(out_pipe[1], 1);
    ::close(out_pipe[0]);
    const std::string cmd = "exec " + long_train_cmd(d, "o") + " 2> " + err_path;
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  // Training has started once its first log line is out.
  char c = 0;
  while (::read(out_pipe[0], &c, 1) == 1 && c != '\n') {
  }
  REQUIRE(c == '\n');
  REQUIRE(::kill(pid, SIGTERM) == 0);
  std::thread drain([&] {  // keep reading, so the run never blocks on a full pipe
    char buf[4096];
    while (::read(out_pipe[0], buf, sizeof buf) > 0) {
    }
  });
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  drain.join();
  ::close(out_pipe[0]);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 143);
  const auto [line, lines] = last_line(err_path);
  CHECK(lines == 1);
  CHECK(line.rfind("stopped by SIGTERM after step ", 0) == 0);
  const std::string tail = "; checkpoint " + (d / "o") +
                           "/checkpoint.safetensors (continue with --resume " + (d / "o") + ")";
  CHECK(line.size() > tail.size());
  CHECK(line.substr(line.size() - std::min(line.size(), tail.size())) == tail);
  CHECK(fs::exists(d / "o/checkpoint.safetensors"));
  CHECK(!fs::exists(d / "o/tapegrad.lock"));
}

TEST_CASE("a closed stdout (train | head -1) stops with a saved checkpoint and one line") {
  Dir d;
  const std::string cmd = "{ " + long_train_cmd(d, "o") + " 2> " + (d / "err") + "; echo $? > " +
                          (d / "rc") + "; } | head -1 > " + (d / "out");
  REQUIRE(std::system(("sh -c '" + cmd + "'").c_str()) == 0);
  CHECK(last_line(d / "rc").first == "1");
  CHECK(last_line(d / "out").second == 1);
  const auto [line, lines] = last_line(d / "err");
  CHECK(lines == 1);
  CHECK(line.rfind("tapegrad train: cannot write the output to stdout (disk full or pipe closed?); "
                   "stopped after step ",
                   0) == 0);
  const std::string tail = " with checkpoint " + (d / "o") +
                           "/checkpoint.safetensors (continue with --resume " + (d / "o") + ")";
  CHECK(line.substr(line.size() - std::min(line.size(), tail.size())) == tail);
  CHECK(fs::exists(d / "o/checkpoint.safetensors"));
  // tokenize and generate report a closed pipe too, instead of dying of SIGPIPE unheard.
  const std::string exe = TG_TAPEGRAD_EXE;
  CHECK(with_stdout_closed(exe + " tokenize " + TG_GOLDEN_DIR + "/train_text.txt 2> " +
                           (d / "terr")) == 1);
  CHECK(last_line(d / "terr").first ==
        "tapegrad tokenize: cannot write the output to stdout (disk full or pipe closed?)");
  // Appending the ids to the text being read.
  spit(d / "t.txt", "some text");
  const std::string append =
      exe + " tokenize " + (d / "t.txt") + " >> " + (d / "t.txt") + " 2> " + (d / "aerr");
  CHECK(WEXITSTATUS(std::system(append.c_str())) == 2);
  CHECK(slurp(d / "aerr") == "tapegrad tokenize: stdout /dev/stdout is the same file as the text " +
                                 (d / "t.txt") +
                                 " (refused: writing one would destroy the other)\n");
  CHECK(slurp(d / "t.txt") == "some text");
  CHECK(with_stdout_closed(exe + " generate --checkpoint " + (d / "o") + " 2> " + (d / "gerr")) ==
        1);
  CHECK(last_line(d / "gerr").first ==
        "tapegrad generate: cannot write the output to stdout (disk full or pipe closed?)");
}

TEST_CASE("one run per --out: a second is refused at once naming the holder; --seed on --resume") {
  Dir d;
  const std::string dir = make_checkpoint(d, "ck", false);
  const std::string text = std::string(TG_GOLDEN_DIR) + "/train_text.txt";
  const std::vector<std::string> fresh = {"train",   "--text",    text,    "--tokenizer",
                                          "bpe:300", "--context", "16",    "--epochs",
                                          "0",       "--out",     d / "f", "--no-progress"};
  fs::create_directories(d / "f");
  {
    DirLock held;  // another run's lock, as this process holds it
    long holder = 0;
    REQUIRE(held.acquire(dir, holder));
    DirLock held_f;
    REQUIRE(held_f.acquire(d / "f", holder));
    const std::string pid = std::to_string(::getpid());
    const Result r =
        run(cli::train_main, {"train", "--resume", dir, "--epochs", "2", "--no-progress"});
    CHECK(r.rc == 1);
    CHECK(r.err == "tapegrad train: --out " + dir + " is in use by another run (PID " + pid +
                       "); wait for it to end or choose another --out\n");
    const Result f = run(cli::train_main, fresh);
    CHECK(f.rc == 1);
    CHECK(f.err == "tapegrad train: --out " + (d / "f") + " is in use by another run (PID " + pid +
                       "); wait for it to end or choose another --out\n");
  }
  const Result f = run(cli::train_main, fresh);  // the holder is gone: the run goes ahead
  CHECK(f.rc == 0);
  CHECK(!fs::exists(d / "f/tapegrad.lock"));
  // A procfs text (stat size 0) is read, not called empty: too short for a window of 1024.
  const Result proc = run(
      cli::train_main, {"train", "--text", "/proc/self/status", "--context", "1024", "--preset",
                        "gpt2-124m", "--tokenizer", "bpe:256", "--out", d / "p", "--no-progress"});
  CHECK(proc.rc == 1);
  CHECK(proc.err.rfind("tapegrad train: text too short: the validation split of "
                       "'/proc/self/status' has ",
                       0) == 0);
  // bpe:N on a text with fewer pairs says so, as bpe-train does.
  std::vector<std::string> big = fresh;
  big[4] = "bpe:100000";
  const Result w = run(cli::train_main, big);
  CHECK(w.rc == 0);
  CHECK(w.err == "warning: the training text of " + text +
                     " ran out of pairs; tokenizer bpe:100000 has 427 tokens, not 100000\n"
                     "nothing to do: --epochs 0\n");

  // --seed cannot change a resumed run's draws (the generator's state is the checkpoint's).
  const Result s = run(cli::train_main, {"train", "--resume", dir, "--seed", "7", "--epochs", "2"});
  CHECK(s.rc == 2);
  CHECK(s.err == "tapegrad train: --seed 7 does not match the checkpoint " + dir +
                     "/checkpoint.safetensors (trained with 123); a checkpoint from another "
                     "config\n");
  const Result same = run(cli::train_main, {"train", "--resume", dir, "--seed", "123", "--epochs",
                                            "2", "--no-progress"});
  CHECK(same.rc == 0);
}

TEST_CASE("make's apt-get waits for another package manager's lock, saying so, within a bound") {
  Dir d;
  // A stand-in apt-get: fails `fails` times with MODE's message, then succeeds.
  spit(d / "apt-get",
       "#!/bin/sh\n"
       "echo \"$*\" >> " +
           (d / "args") +
           "\n"
           "n=$(cat " +
           (d / "count") + " 2>/dev/null || echo 0); echo $((n + 1)) > " + (d / "count") +
           "\n"
           "[ \"$n\" -ge \"$FAILS\" ] && exit 0\n"
           "case $MODE in\n"
           "lists) echo 'E: Could not get lock /var/lib/apt/lists/lock. It is held by process 42 "
           "(unattended-upgr)' >&2; echo 'E: Unable to lock directory /var/lib/apt/lists/' >&2;;\n"
           "dpkg) echo 'Waiting for cache lock: Could not get lock /var/lib/dpkg/lock-frontend. It "
           "is held by process 7 (apt)...' >&2; echo 'E: Unable to acquire the dpkg frontend lock "
           "(/var/lib/dpkg/lock-frontend), is another process using it?' >&2;;\n"
           "*) echo 'E: Unable to locate package nosuch' >&2;;\n"
           "esac\n"
           "exit 100\n");
  fs::permissions(d / "apt-get", fs::perms::owner_all);
  struct Case {
    std::string mode;
    int fails, timeout, rc;
    std::vector<std::string> lines;  // stderr of the wrapper itself ("make: ...")
  };
  const std::string lists =
      "make: waiting for /var/lib/apt/lists/lock, held by process 42 "
      "(unattended-upgr); up to ";
  const std::string dpkg =
      "make: waiting for /var/lib/dpkg/lock-frontend, held by process 7 (apt); up to ";
  const std::vector<Case> cases = {
      {"lists", 0, 600, 0, {}},
      {"lists", 2, 600, 0, {lists, lists}},
      {"dpkg", 1, 600, 0, {dpkg}},
      {"other", 1, 600, 100, {}},
      {"lists",
       99,
       0,
       100,
       {"make: gave up after 0 s waiting for /var/lib/apt/lists/lock, held by process 42 "
        "(unattended-upgr) (raise APT_LOCK_TIMEOUT, or run make again once that package manager "
        "is done)"}},
  };
  for (const Case& c : cases) {
    fs::remove(d / "count");
    fs::remove(d / "args");
    const std::string cmd = "PATH=" + d.dir + ":$PATH MODE=" + c.mode +
                            " FAILS=" + std::to_string(c.fails) + " APT_RETRY_SECONDS=0 " +
                            TG_SOURCE_ROOT + "/tools/apt_get.sh " + std::to_string(c.timeout) +
                            " install -y -q x > /dev/null 2> " + (d / "err");
    const int status = std::system(cmd.c_str());
    INFO("mode ", c.mode, ", fails ", c.fails, ", timeout ", c.timeout);
    CHECK(WEXITSTATUS(status) == c.rc);
    std::vector<std::string> mine;
    std::istringstream err(slurp(d / "err"));
    for (std::string line; std::getline(err, line);)
      if (line.rfind("make: ", 0) == 0) mine.push_back(line);
    REQUIRE(mine.size() == c.lines.size());
    for (size_t i = 0; i < mine.size(); ++i) CHECK(mine[i].rfind(c.lines[i], 0) == 0);
    // apt-get itself waits for dpkg's lock, for what is left of the bound.
    const std::string args = slurp(d / "args");
    REQUIRE(args.rfind("-o DPkg::Lock::Timeout=", 0) == 0);
    const int left = std::atoi(args.c_str() + 23);
    CHECK(left <= c.timeout);
    CHECK(left >= c.timeout - 2);
  }
}

TEST_CASE("a bad memory setting stops every command with one line naming it") {
  Dir d;
  const std::string huge = "TAPEGRAD_HUGE_PAGES='yes' is not a switch: use 0 (the default) or 1";
  const std::string cache =
      "TAPEGRAD_BLOCK_CACHE_MB='lots' is not a size: use a whole number of MiB up to 16777216, 0 "
      "to cache nothing (the default is 2048)";
  const std::string text = std::string(TG_GOLDEN_DIR) + "/train_text.txt";
  struct Case {
    std::string env, args, line;
  };
  const std::vector<Case> cases = {
      {"TAPEGRAD_HUGE_PAGES=yes", "chapter3 --cell 3", "tapegrad chapter3: " + huge},
      {"TAPEGRAD_BLOCK_CACHE_MB=lots", "chapter3 --cell 3", "tapegrad chapter3: " + cache},
      {"TAPEGRAD_BLOCK_CACHE_MB=lots", "tokenize " + text, "tapegrad tokenize: " + cache},
      {"TAPEGRAD_HUGE_PAGES=yes", "bpe-train " + text + " --vocab-size 300 -o " + (d / "v"),
       "tapegrad bpe-train: " + huge},
      {"TAPEGRAD_BLOCK_CACHE_MB=lots", "generate --checkpoint " + (d / "none"),
       "tapegrad generate: " + cache},
      {"TAPEGRAD_BLOCK_CACHE_MB=lots",
       "train --text " + text + " --tokenizer bpe:300 --context 16 --max-steps 1 --out " +
           (d / "t"),
       "tapegrad train: " + cache},
  };
  for (const Case& c : cases) {
    INFO(c.env, " tapegrad ", c.args);
    const std::string cmd =
        "env " + c.env + " " + TG_TAPEGRAD_EXE + " " + c.args + " > /dev/null 2> " + (d / "err");
    CHECK(WEXITSTATUS(std::system(cmd.c_str())) == 1);
    CHECK(slurp(d / "err") == c.line + "\n");
  }
  CHECK_FALSE(fs::exists(d / "t"));
  CHECK_FALSE(fs::exists(d / "v"));
}
