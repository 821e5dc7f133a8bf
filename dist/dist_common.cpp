// What both implementations of dist.h share: reading the launcher's environment, and
// gather_all_equal on top of gather_all.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dist/dist.h"

namespace tg::dist {

namespace {

// A whole number >= `least` from variable `name`, or -1 when unset or not such a number.
long env_number(const std::function<const char*(const char*)>& env, const char* name, long least) {
  const char* v = env(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' && n >= least && n < (1L << 30) ? n : -1;
}

}  // namespace

Launch read_launch(const std::function<const char*(const char*)>& env) {
  Launch l;
  // Open MPI's mpirun, then PMI-1/2: a count and a rank.
  for (const auto& [size, rank] : {std::pair{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
                                   std::pair{"PMI_SIZE", "PMI_RANK"}}) {
    const long n = env_number(env, size, 1);
    if (n < 0) continue;
    l.size = int(n);
    l.rank = int(std::max(0L, env_number(env, rank, 0)));
    return l;
  }
  // PMIx sets a rank but no count: even rank 0 may be one of several.
  if (const long r = env_number(env, "PMIX_RANK", 0); r >= 0) {
    l.pmix = true;
    l.rank = int(r);
    l.size = int(std::max(0L, env_number(env, "SLURM_STEP_NUM_TASKS", 1)));
    return l;
  }
  // A PMI rank without a count: one of several when it is not the first.
  if (const long r = env_number(env, "PMI_RANK", 0); r >= 0) {
    l.rank = int(r);
    l.size = r > 0 ? 0 : 1;
  }
  return l;
}

void gather_all_equal(const void* mine, void* all, size_t bytes) {
  const size_t n = size_t(size());
  std::vector<size_t> sizes(n, bytes), offsets;
  for (size_t r = 0; r < n; ++r) offsets.push_back(r * bytes);
  gather_all(mine, all, sizes, offsets);
}

int parse_timeout(const char* text) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || v < 0 || v > kMaxTimeout ||
      !std::isdigit(static_cast<unsigned char>(text[0])))
    throw std::invalid_argument(std::string("TAPEGRAD_DIST_TIMEOUT='") + text +
                                "' is not a timeout: use whole seconds from 0 (no limit) to " +
                                std::to_string(kMaxTimeout));
  return int(v);
}

int timeout_from_env() {
  const char* s = std::getenv("TAPEGRAD_DIST_TIMEOUT");
  return s == nullptr || *s == '\0' ? kDefaultTimeout : parse_timeout(s);
}

Launch launch() {
  return read_launch([](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace tg::dist
