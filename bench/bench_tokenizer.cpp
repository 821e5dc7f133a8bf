// bench_tokenizer: GPT-2 encoding speed (MB per CPU second, one thread) on the-verdict repeated to
// ~10 MB and on a mixed corpus, against npm tiktoken (WASM) on the same text when node and the
// package are present; BPE training time for vocab 1024 and 4096 on 1 MB. Checks before timing: our
// token count must equal tiktoken's.
// Options: bench_tokenizer --help (the table: bench/bench_tokenizer_options.h).
// The header (and --json) names the CPU and its caches.
// Targets (issue 5): >= 10x tiktoken's WASM, >= 20 MB/s; training 4096 on 1 MB < 5 s.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_tokenizer_options.h"
#include "bench/cli_args.h"
#include "bench/machine.h"
#include "core/json.h"
#include "data/bpe_tokenizer.h"
#include "data/bpe_train.h"

namespace fs = std::filesystem;
using tg::data::Tokenizer;

namespace {

const std::string kSrc = TAPEGRAD_SOURCE_ROOT;

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string repeat_to(const std::string& s, size_t bytes) {
  std::string out;
  if (s.empty()) return out;
  while (out.size() < bytes) out += s;
  return out;
}

// This thread's CPU seconds: the machine is shared, and time spent descheduled is not ours.
double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

double best_seconds(int reps, const std::function<void()>& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = cpu_now();
    f();
    best = std::min(best, cpu_now() - t0);
  }
  return best;
}

// Runs npm tiktoken on the file; returns MB per CPU second (best of 3 after a warm-up) and the
// token count.
bool tiktoken_mbps(const std::string& text_path, double& mbps, size_t& n_tokens) {
  const std::string pkg = kSrc + "/tests/golden/tiktoken/node_modules/tiktoken";
  if (!fs::exists(pkg) || std::system("node --version >/dev/null 2>&1") != 0) return false;
  const std::string js = (fs::temp_directory_path() / "tg_bench_tiktoken.cjs").string();
  std::ofstream(js) << "const { get_encoding } = require(process.argv[2]);\n"
                       "const fs = require('fs');\n"
                       "const text = fs.readFileSync(process.argv[3], 'utf8');\n"
                       "const enc = get_encoding('gpt2');\n"
                       "let n = enc.encode_ordinary(text).length, best = 1e30;\n"
                       "for (let r = 0; r < 3; ++r) {\n"
                       "  const t0 = process.cpuUsage();\n"
                       "  n = enc.encode_ordinary(text).length;\n"
                       "  const d = process.cpuUsage(t0);\n"
                       "  best = Math.min(best, (d.user + d.system) / 1e6);\n"
                       "}\n"
                       "console.log((Buffer.byteLength(text) / 1e6 / best) + ' ' + n);\n";
  const std::string cmd = "node " + js + " " + pkg + " " + text_path;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return false;
  char buf[256] = {};
  const bool ok = std::fgets(buf, sizeof buf, p) != nullptr;
  pclose(p);
  fs::remove(js);
  return ok && std::sscanf(buf, "%lf %zu", &mbps, &n_tokens) == 2;
}

struct Row {
  std::string name;
  double mb, ours, tik;  // MB, MB/s, MB/s (0: not measured)
  size_t tokens;
};

using bench_tokenizer::Options;

// Mixed: prose, the multilingual/emoji golden corpus, C++ sources, and hex (long chunks).
std::string mixed_text(const std::string& verdict) {
  std::string mixed = verdict + read(kSrc + "/tests/golden/tokenizer_corpus.txt");
  for (const char* f :
       {"data/bpe_tokenizer.cpp", "data/pretokenize.cpp", "data/bpe_train.cpp",
        "data/gpt_dataset.cpp", "app/tokenize_cmd.cpp", "bench/bench_tokenizer.cpp"})
    mixed += read(kSrc + "/" + f);
  return mixed + read(kSrc + "/tests/golden/tokenizer_golden.txt").substr(0, 60000);
}

// Encodes text with ours (and npm tiktoken, which must give as many tokens) into one row.
Row encode_row(const Tokenizer& tok, const std::string& name, const std::string& text,
               bool use_tiktoken) {
  if (text.empty()) throw std::runtime_error("no text for " + name + " (is ../shared/data there?)");
  size_t n = 0;
  const double s = best_seconds(3, [&] { n = tok.encode_ordinary(text).size(); });
  Row row{name, text.size() / 1e6, text.size() / 1e6 / s, 0, n};
  const std::string path = (fs::temp_directory_path() / "tg_bench_text.txt").string();
  std::ofstream(path, std::ios::binary) << text;
  size_t n_tik = 0;
  double tik = 0;
  const bool measured = use_tiktoken && tiktoken_mbps(path, tik, n_tik);
  fs::remove(path);
  if (measured && n_tik != n)
    throw std::runtime_error("MISMATCH on " + name + ": " + std::to_string(n) +
                             " tokens, tiktoken " + std::to_string(n_tik));
  if (measured) row.tik = tik;
  return row;
}

// Seconds to learn vocabularies of 1024 and 4096 from 1 MB of the mixed text.
std::vector<std::pair<int, double>> train_seconds(const std::string& mixed) {
  const std::string train_text = repeat_to(mixed, 1000000).substr(0, 1000000);
  std::vector<std::pair<int, double>> train;
  for (const int v : {1024, 4096}) {
    tg::data::BpeTrainStats st;
    const double s = best_seconds(2, [&] { tg::data::bpe_train_merges(train_text, v, {}, &st); });
    train.emplace_back(v, s);
  }
  return train;
}

void print_json(const std::vector<Row>& rows, const std::vector<std::pair<int, double>>& train) {
  std::printf("{\"cpu\": %s, \"caches\": %s, \"encode\": [",
              tg::json::quote(bench::cpu_model()).c_str(),
              tg::json::quote(bench::cache_sizes()).c_str());
  for (size_t k = 0; k < rows.size(); ++k)
    std::printf(
        "%s{\"text\": \"%s\", \"mb\": %.2f, \"tokens\": %zu, \"mb_per_s\": %.2f, "
        "\"tiktoken_mb_per_s\": %s}",
        k ? ", " : "", rows[k].name.c_str(), rows[k].mb, rows[k].tokens, rows[k].ours,
        rows[k].tik > 0 ? std::to_string(rows[k].tik).c_str() : "null");
  std::printf("], \"train_1mb\": [");
  for (size_t k = 0; k < train.size(); ++k)
    std::printf("%s{\"vocab_size\": %d, \"seconds\": %.3f}", k ? ", " : "", train[k].first,
                train[k].second);
  std::printf("]}\n");
}

void print_table(const std::vector<Row>& rows, const std::vector<std::pair<int, double>>& train) {
  std::printf("cpu: %s (%s)\n", bench::cpu_model().c_str(), bench::cache_sizes().c_str());
  std::printf("GPT-2 encode_ordinary, one thread, MB per CPU second, best of 3\n");
  std::printf("%-16s %8s %10s %10s %14s %8s\n", "text", "MB", "tokens", "MB/s", "tiktoken MB/s",
              "ratio");
  for (const auto& r : rows) {
    if (r.tik > 0) {
      std::printf("%-16s %8.2f %10zu %10.2f %14.2f %7.1fx\n", r.name.c_str(), r.mb, r.tokens,
                  r.ours, r.tik, r.ours / r.tik);
    } else {
      std::printf("%-16s %8.2f %10zu %10.2f %14s %8s\n", r.name.c_str(), r.mb, r.tokens, r.ours,
                  "(no node)", "-");
    }
  }
  std::printf("\nBPE training on 1 MB (mixed text)\n");
  for (const auto& [v, s] : train) std::printf("  vocab %5d: %7.3f s\n", v, s);
}

}  // namespace

// Errors (a missing text, a token count tiktoken disagrees with) are exceptions: main prints them.
int run(int argc, char** argv) {
  Options o;
  bench::parse_command(bench_tokenizer::command(), "bench_tokenizer", argc, argv, o);
  const Tokenizer tok = Tokenizer::gpt2();
  const std::string verdict_path = kSrc + "/../shared/data/the-verdict.txt";
  const std::string verdict = read(verdict_path);
  if (verdict.empty())
    throw std::runtime_error("cannot read " + verdict_path + " (the book's sample text)");
  const std::string mixed = mixed_text(verdict);
  const size_t bytes = static_cast<size_t>(o.mb * 1e6);
  std::vector<Row> rows;
  rows.push_back(encode_row(tok, "the-verdict x N", repeat_to(verdict, bytes), !o.no_tiktoken));
  rows.push_back(encode_row(tok, "mixed", repeat_to(mixed, bytes), !o.no_tiktoken));
  const std::vector<std::pair<int, double>> train = train_seconds(mixed);
  if (o.json)
    print_json(rows, train);
  else
    print_table(rows, train);
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // e.g. GPT-2's tokenizer files not fetched (make gpt2)
    std::fprintf(stderr, "bench_tokenizer: %s\n", e.what());
    return 1;
  }
}
