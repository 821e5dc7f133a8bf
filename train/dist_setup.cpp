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
#include <tuple>
#include <utility>

#include "core/file_io.h"
#include "core/json.h"
#include "core/ops.h"
#include "core/text.h"
#include "core/threadpool.h"
#include "dist/dist.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
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

// The running program's bytes.
std::string build_id() {
  std::string exe;
  try {
    exe = read_regular_file("/proc/self/exe", uint64_t(1) << 32, "program");
  } catch (const std::exception&) {
    exe = __DATE__ " " __TIME__;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(exe)));
  return hex;
}

// A number as a user would type it: the shortest text that reads back as the same double
// (5e-4, not 0.0005 nor the stored 0.00050000000000000001).
std::string typed_number(double v) {
  char buf[32];
  const std::string s(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
  // to_chars writes printf's exponent, a sign and at least two digits: 5e-04 reads 5e-4.
  const size_t e = s.find('e');
  if (e == std::string::npos) return s;
  std::string exponent = s.substr(e + 1);
  const bool minus = exponent[0] == '-';
  exponent.erase(0, 1);
  exponent.erase(0, std::min(exponent.find_first_not_of('0'), exponent.size() - 1));
  return s.substr(0, e + 1) + (minus ? "-" : "") + exponent;
}

// What the ranks compare at start: the build, every row of the option table, and the settings
// each rank reads from its own environment that change the numbers or the exchange's shape.
// `value` is compared, `shown` is what a message prints; `error`: the setting is malformed.
struct Entry {
  std::string key, value, shown, error;
};

// The build and the options: what only several ranks compare.
std::vector<Entry> option_entries(const TrainOptions& o) {
  std::vector<Entry> out = {{"build", build_id(), build_id(), ""}};
  for (const cli::Option<TrainOptions>& row : train_command().options) {
    const json::Value v = cli::detail::get(o, row);
    const std::string text = v.kind == json::Value::Kind::Bool  ? (v.b ? "true" : "false")
                             : row.spec.kind == cli::Kind::Real ? typed_number(v.num)
                                                                : v.str;
    out.push_back({"--" + row.spec.name, text, text, ""});
  }
  return out;
}

// The settings, read (and checked) by one process too.
std::vector<Entry> setting_entries() {
  std::vector<Entry> out;
  // A setting read by `read` as {compared value, shown value} (it may throw on a malformed
  // one); the shown value says when the variable is unset.
  using Read = std::pair<std::string, std::string>;
  const auto setting = [&](const char* name, const std::function<Read()>& read) {
    Entry e{name, "", "", ""};
    try {
      std::tie(e.value, e.shown) = read();
      const char* env = std::getenv(name);
      if (!env || !*env) e.shown += " (unset)";
    } catch (const std::exception& x) {
      e.error = x.what();
    }
    out.push_back(e);
  };
  setting("TAPEGRAD_THREADS", [] {  // checked only: the numbers do not depend on it
    if (const char* t = std::getenv("TAPEGRAD_THREADS"); t && *t) parse_thread_count(t);
    return Read();
  });
  setting("TAPEGRAD_HUGE_PAGES", [] {  // checked only: where memory sits changes no number
    huge_pages_enabled();
    return Read();
  });
  setting("TAPEGRAD_BLOCK_CACHE_MB",
          [] {  // checked only: which blocks are reused changes no number
            block_cache_limit_mb();
            return Read();
          });
  setting("TAPEGRAD_BUCKET_MB", [] {
    const std::string mb = typed_number(bucket_mb_from_env());
    return Read(mb, mb);
  });
  setting("TAPEGRAD_ISA", [] { return Read(kernel_path(), kernel_path()); });
  // Of MC,KC,NC only KC, where a dot product is split, changes the numbers.
  setting("TAPEGRAD_GEMM_BLOCKING", [] {
    const std::string mkn = gemm_blocking();
    const size_t a = mkn.find(',') + 1;
    return Read(mkn.substr(a, mkn.find(',', a) - a), mkn);
  });
  return out;
}

std::string serialize(const std::vector<Entry>& list) {
  std::string s;
  for (const Entry& e : list)
    s += json::quote(e.key) + "," + json::quote(e.value) + "," + json::quote(e.shown) + '\n';
  return s;
}

std::vector<Entry> deserialize(const std::string& s) {
  std::vector<Entry> out;
  for (size_t at = 0, nl; (nl = s.find('\n', at)) != std::string::npos; at = nl + 1) {
    std::string line(1, '[');  // not "[" + ...: GCC 12 warns of a bogus overlap (-Wrestrict)
    line.append(s, at, nl - at).push_back(']');
    const json::Value v = json::parse(line);
    out.push_back({v.items[0].str, v.items[1].str, v.items[2].str, ""});
  }
  return out;
}

// A value in a message: bare unless it is empty or holds a space.
std::string shown(const std::string& v) {
  return v.empty() || v.find_first_of(" \t\n") != std::string::npos ? json::quote(v)
                                                                    : show_bytes(v);
}

// How rank r's list differs from rank 0's, in one line, and whether it is the command line's
// (exit status 2) or the environment's.
std::pair<std::string, bool> difference(int r, const std::vector<Entry>& mine,
                                        const std::vector<Entry>& root) {
  const std::string who = "rank " + std::to_string(r);
  for (size_t i = 0; i < std::min(mine.size(), root.size()); ++i) {
    const Entry &a = mine[i], &b = root[i];
    if (a.key == b.key && a.value == b.value) continue;
    if (i == 0 || a.key != b.key)
      return {who + " runs another build of tapegrad (" + a.value + ") than rank 0 (" + b.value +
                  "); every rank must run the same binary",
              true};
    if (a.key.rfind("--", 0) == 0)
      return {who + " has " + a.key + " " + shown(a.shown) + ", rank 0 has " + shown(b.shown) +
                  "; every rank must run with the same options",
              true};
    return {who + " has " + a.key + "=" + a.shown + ", rank 0 has " + b.shown +
                "; every rank must run with the same settings",
            false};
  }
  return {who + " runs with other options than rank 0", true};
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
  const bool given = opt.micro_batches != 0;
  if (!given) opt.micro_batches = dist::size();
  check_micro_batches(opt.micro_batches, dist::size(), opt.batch_size,
                      is_explicit(opt, "micro-batches") ? "" : " (the checkpoint's)", given);
}

void check_same_options(const TrainOptions& opt) {
  const std::vector<Entry> settings = setting_entries();
  std::string error;  // this rank's first malformed setting
  for (const Entry& e : settings)
    if (error.empty()) error = e.error;
  const int ranks = dist::size();
  if (ranks == 1) {
    if (!error.empty()) throw TrainError(error);
    return;
  }
  std::vector<Entry> mine = option_entries(opt);
  mine.insert(mine.end(), settings.begin(), settings.end());
  struct Vote {
    uint64_t hash;
    int64_t error;
  };
  std::string values;
  for (const Entry& e : mine) values += json::quote(e.key) + json::quote(e.value) + '\n';
  const Vote v{fnv1a(values), error.empty() ? 0 : 1};
  std::vector<Vote> votes(static_cast<size_t>(ranks));
  dist::gather_all_equal(&v, votes.data(), sizeof v);
  for (int r = 0; r < ranks; ++r) {  // a setting malformed on some rank: the first one's
    if (!votes[size_t(r)].error) continue;
    dist::broadcast(error, r);
    throw TrainError("rank " + std::to_string(r) + ": " + error);
  }
  int odd = 0;  // the first rank whose hash is not rank 0's
  for (int r = ranks - 1; r > 0; --r)
    if (votes[size_t(r)].hash != votes[0].hash) odd = r;
  if (odd == 0) return;
  std::string root = serialize(mine);
  dist::broadcast(root);
  std::pair<std::string, bool> d;
  if (dist::rank() == odd) d = difference(odd, mine, deserialize(root));
  dist::broadcast(d.first, odd);
  dist::broadcast(&d.second, sizeof d.second, odd);
  if (d.second) throw UsageError(d.first);
  throw TrainError(d.first);
}

}  // namespace tg::train
