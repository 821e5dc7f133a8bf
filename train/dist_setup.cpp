// Setting up a data-parallel run on every rank (see data_parallel.h): rank 0's files and errors
// shared with the others, and the check that all ranks run one build with one set of options.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "core/file_io.h"
#include "core/json.h"
#include "core/ops.h"
#include "core/text.h"
#include "core/threadpool.h"
#include "dist/dist.h"
#include "train/checkpoint.h"
#include "train/dist_setup.h"
#include "train/train_options.h"

namespace tg::train {

void on_root(const std::function<void()>& f) {
  if (dist::size() == 1) return f();
  int kind = 0;  // 0 fine, 1 TrainError, 2 UsageError, 3 another exception
  std::string message;
  std::exception_ptr error;
  if (dist::is_root()) {
    try {
      f();
    } catch (const UsageError& e) {
      kind = 2, message = e.what(), error = std::current_exception();
    } catch (const std::exception& e) {
      kind = dynamic_cast<const TrainError*>(&e) ? 1 : 3;
      message = e.what(), error = std::current_exception();
    }
  }
  dist::broadcast(&kind, sizeof kind);
  if (kind == 0) return;
  dist::broadcast(message);
  if (error) std::rethrow_exception(error);
  if (kind == 2) throw UsageError(message);
  throw TrainError(message);
}

SafeTensors read_checkpoint_on_root(const std::string& path) {
  std::string bytes;
  on_root([&] {
    if (!std::filesystem::exists(path)) throw TrainError(path + ": no checkpoint to resume from");
    try {
      bytes = read_regular_file(path, kMaxSafetensorsBytes, "safetensors");
    } catch (const std::exception& e) {
      throw TrainError(e.what());
    }
  });
  dist::broadcast(bytes);
  SafeTensors st;
  try {
    st = parse_safetensors(bytes, path);
  } catch (const std::exception& e) {
    throw TrainError(e.what());
  }
  check_checkpoint(st, path);  // as read_checkpoint does
  return st;
}

namespace {

// FNV-1a, 64 bits.
uint64_t fnv1a(std::string_view s, uint64_t h = 1469598103934665603ULL) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// The running program's bytes and the kernel path it chose: ranks on machines that pick another
// ISA path would round differently.
std::string build_id() {
  std::string exe;
  try {
    exe = read_regular_file("/proc/self/exe", uint64_t(1) << 32, "program");
  } catch (const std::exception&) {
    exe = __DATE__ " " __TIME__;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(exe)));
  return std::string(hex) + " on the " + kernel_path() + " path";
}

// A stored number as a user would type it: the shortest text that reads back as the same double
// (5e-4, not the stored 0.00050000000000000001); whole numbers as stored (int64 beyond 2^53).
std::string typed_number(const json::Value& x) {
  if (x.str.find_first_of(".eE") == std::string::npos) return x.str;
  char buf[32];
  const std::string s(buf, std::to_chars(buf, buf + sizeof buf, x.num).ptr);
  // to_chars writes printf's exponent, a sign and at least two digits: 5e-04 reads 5e-4.
  const size_t e = s.find('e');
  if (e == std::string::npos) return s;
  std::string exponent = s.substr(e + 1);
  const bool minus = exponent[0] == '-';
  exponent.erase(0, 1);
  exponent.erase(0, std::min(exponent.find_first_not_of('0'), exponent.size() - 1));
  return s.substr(0, e + 1) + (minus ? "-" : "") + exponent;
}

// The options that shape the run, one "--flag value" per entry, in a fixed order.
std::vector<std::pair<std::string, std::string>> option_list(const TrainOptions& o) {
  const json::Value v = json::parse(options_json(o));
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < v.keys.size(); ++i) {
    std::string flag = v.keys[i] == "context_length" ? "context" : v.keys[i];
    std::replace(flag.begin(), flag.end(), '_', '-');
    const json::Value& x = v.values[i];
    out.emplace_back(flag, x.kind == json::Value::Kind::Bool     ? (x.b ? "true" : "false")
                           : x.kind == json::Value::Kind::Number ? typed_number(x)
                                                                 : x.str);
  }
  out.emplace_back("threads", std::to_string(o.threads));
  out.emplace_back("micro-batches", std::to_string(o.micro_batches));
  out.emplace_back("out", o.out_dir);
  out.emplace_back("log", o.log_path);
  out.emplace_back("resume", o.resume_dir);
  out.emplace_back("max-steps", std::to_string(o.max_steps));
  out.emplace_back("overwrite", o.overwrite ? "true" : "false");
  return out;
}

std::string serialize(const std::string& build,
                      const std::vector<std::pair<std::string, std::string>>& opts) {
  std::string s = build + '\n';
  for (const auto& [k, v] : opts) s += k + '=' + json::quote(v) + '\n';
  return s;
}

// A value as serialize() quoted it, shown bare unless it is empty or holds a space.
std::string unquote(const std::string& quoted) {
  const std::string v = json::parse(quoted).str;
  return v.empty() || v.find_first_of(" \t\n") != std::string::npos ? quoted : show_bytes(v);
}

// How rank r's list differs from rank 0's, in one line.
std::string difference(int r, const std::string& mine, const std::string& root) {
  const auto lines = [](const std::string& s) {
    std::vector<std::string> out;
    size_t at = 0;
    for (size_t nl; (nl = s.find('\n', at)) != std::string::npos; at = nl + 1)
      out.push_back(s.substr(at, nl - at));
    return out;
  };
  const std::vector<std::string> a = lines(mine), b = lines(root);
  const std::string who = "rank " + std::to_string(r);
  if (a.empty() || b.empty() || a[0] != b[0])
    return who + " runs another build of tapegrad (" + (a.empty() ? "?" : a[0]) +
           ") than rank 0 (" + (b.empty() ? "?" : b[0]) + "); every rank must run the same binary";
  for (size_t i = 1; i < std::min(a.size(), b.size()); ++i) {
    if (a[i] == b[i]) continue;
    const size_t eq = a[i].find('=');
    return who + " has --" + a[i].substr(0, eq) + " " + unquote(a[i].substr(eq + 1)) +
           ", rank 0 has " + unquote(b[i].substr(b[i].find('=') + 1)) +
           "; every rank must run with the same options";
  }
  return who + " runs with other options than rank 0";
}

}  // namespace

int threads_for(const std::vector<CpuShare>& ranks, int me) {
  const CpuShare& mine = ranks[size_t(me)];
  int64_t sharing = 0;
  for (const CpuShare& r : ranks) sharing += r.host == mine.host && r.mask == mine.mask;
  return int(std::clamp<int64_t>(mine.cpus / sharing, 1, kMaxThreads));
}

int default_threads() {
  CpuShare mine;
  cpu_set_t set;
  CPU_ZERO(&set);
  // hardware_concurrency() counts the machine's cores, not the ones this process may run on.
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    mine.cpus = CPU_COUNT(&set);
    mine.mask = fnv1a(std::string_view(reinterpret_cast<const char*>(&set), sizeof set));
  } else {  // more CPUs than a cpu_set_t holds
    mine.cpus = std::max(1u, std::thread::hardware_concurrency());
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  mine.host = fnv1a(host);
  std::vector<CpuShare> all(static_cast<size_t>(dist::size()));
  dist::gather_all_equal(&mine, all.data(), sizeof mine);
  return threads_for(all, dist::rank());
}

void resolve_micro_batches(TrainOptions& opt) {
  const int ranks = dist::size();
  const bool given = opt.micro_batches != 0;
  if (!given) opt.micro_batches = ranks;
  if (opt.micro_batches % ranks != 0)
    throw UsageError("--micro-batches " + std::to_string(opt.micro_batches) +
                     (is_explicit(opt, "micro-batches") ? "" : " (the checkpoint's)") +
                     " does not split among " + std::to_string(ranks) +
                     " processes; give a multiple of " + std::to_string(ranks));
  if (opt.batch_size % opt.micro_batches == 0) return;
  if (given || opt.micro_batches == 1)
    throw UsageError("--batch-size " + std::to_string(opt.batch_size) + " does not split into " +
                     std::to_string(opt.micro_batches) + " micro-batches");
  throw UsageError("--batch-size " + std::to_string(opt.batch_size) + " does not split among " +
                   std::to_string(ranks) + " processes; give a multiple of " +
                   std::to_string(ranks));
}

void check_same_options(const TrainOptions& opt) {
  const int ranks = dist::size();
  if (ranks == 1) return;
  const std::string mine = serialize(build_id(), option_list(opt));
  std::vector<uint64_t> hashes(static_cast<size_t>(ranks));
  const uint64_t h = fnv1a(mine);
  dist::gather_all_equal(&h, hashes.data(), sizeof h);
  int odd = 0;  // the first rank whose hash is not rank 0's
  for (int r = ranks - 1; r > 0; --r)
    if (hashes[size_t(r)] != hashes[0]) odd = r;
  if (odd == 0) return;
  std::string root = mine;
  dist::broadcast(root);
  std::string message = dist::rank() == odd ? difference(odd, mine, root) : "";
  dist::broadcast(message, odd);
  throw UsageError(message);
}

}  // namespace tg::train
