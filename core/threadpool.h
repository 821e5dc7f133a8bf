// A persistent pool of std::threads for the kernels (no OpenMP). The calling thread takes part in
// every job, so num_threads() == 1 means "no worker threads at all".
//
// The count comes from TAPEGRAD_THREADS when set (1 to kMaxThreads), else from usable_cpus();
// set_num_threads() changes it at run time.
// Not here: work stealing, priorities, futures. A parallel_for issued from inside a task, or while
// another thread's job is running, runs serially on the caller.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <stdexcept>

namespace tg {

// The most threads a pool may have (TAPEGRAD_THREADS, set_num_threads).
constexpr int kMaxThreads = 1024;
// Threads a parallel_for may use (>= 1). Throws std::invalid_argument on the first call when
// TAPEGRAD_THREADS is set but is not an integer from 1 to kMaxThreads.
int num_threads();
// The CPUs this process may run on (its affinity mask on Linux, else
// std::thread::hardware_concurrency()), from 1 to kMaxThreads.
int usable_cpus();
// TAPEGRAD_THREADS's value as a count, or std::invalid_argument quoting it and the range.
int parse_thread_count(const char* text);
// 1 <= n <= kMaxThreads; joins or starts workers as needed. Call only while no parallel_for is
// running.
void set_num_threads(int n);
// Runs fn(i) for every i in [0, n_tasks) on up to num_threads() threads and returns when all are
// done. Which thread runs which task is unspecified, so tasks must not depend on it. If a task
// throws, no further tasks start and the first exception is rethrown here once all have stopped.
void parallel_for(int64_t n_tasks, const std::function<void(int64_t)>& fn);

// A reusable spinning barrier (yields while waiting) for the members of one parallel_team.
// abort() releases every waiter, now and later, with a TeamAborted exception.
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void arrive_and_wait();
  void abort() { aborted_.store(true, std::memory_order_release); }

 private:
  const int n_;
  std::atomic<int> count_{0};
  std::atomic<uint64_t> gen_{0};
  std::atomic<bool> aborted_{false};
};

// What a team member waiting at the barrier throws when another member threw.
struct TeamAborted : std::runtime_error {
  TeamAborted() : std::runtime_error("parallel_team: another member of the team threw") {}
};

// Runs fn(tid, team, barrier) for tid in [0, team) on `team` threads at the same time, team =
// min(n, num_threads()), or team = 1 when the pool is busy or this is a nested call. The members
// run concurrently, so unlike parallel_for tasks they may wait for each other on `barrier`
// (sized for the team). If a member throws, the barrier is aborted so that no member waits for
// it for ever, and the first member's own exception (not a TeamAborted) is rethrown here.
void parallel_team(int n, const std::function<void(int tid, int team, Barrier& barrier)>& fn);

}  // namespace tg
