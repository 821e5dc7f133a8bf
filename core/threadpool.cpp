// Persistent thread pool: each job hands out task indices through one atomic counter, so load
// balance is dynamic but results never depend on it (every task writes its own disjoint outputs).
// Between jobs a worker first spins (yielding) for up to kSpin, then sleeps on a condition
// variable: back-to-back GEMMs in a training step then start without a futex wake-up (~10-50 µs,
// the whole run time of a 128³ GEMM), while an idle pool costs nothing.
#include "core/threadpool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tg {

namespace {

int threads_from_env() {
  const char* s = std::getenv("TAPEGRAD_THREADS");
  if (s == nullptr || *s == '\0') return usable_cpus();
  return parse_thread_count(s);
}

thread_local bool t_inside_task = false;

constexpr std::chrono::microseconds kSpin{100};

// Yields until pred() holds or kSpin has passed; returns pred().
template <class P>
bool spin_until(P pred) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    if (pred()) return true;
    if ((i & 63) == 63 && std::chrono::steady_clock::now() - t0 > kSpin) return pred();
    std::this_thread::yield();
  }
}

class Pool {
 public:
  explicit Pool(int n) { resize(n); }
  ~Pool() { stop_workers(); }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int n) {
    stop_workers();
    stop_.store(false);
    // A new worker must not mistake the last finished job for a fresh one.
    const uint64_t current = generation_.load();
    for (int i = 0; i + 1 < n; ++i)
      workers_.emplace_back([this, current] { worker_loop(current); });
  }

  void run(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (workers_.empty() || n_tasks == 1 || t_inside_task || !busy.owns_lock()) {
      for (int64_t i = 0; i < n_tasks; ++i) fn(i);
      return;
    }
    launch(n_tasks, fn);
  }

  // At most one task per thread, and every thread of the pool takes part in every job, so the
  // team's tasks all run at the same time and may wait for each other.
  void run_team(int n, const std::function<void(int, int, Barrier&)>& fn) {
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    const int team = std::min(n, size());
    if (team <= 1 || t_inside_task || !busy.owns_lock()) {
      Barrier solo(1);
      fn(0, 1, solo);
      return;
    }
    Barrier barrier(team);
    std::mutex cause_mu;
    std::exception_ptr cause;  // the first exception that was not a TeamAborted
    const std::function<void(int64_t)> task = [&](int64_t i) {
      try {
        fn(static_cast<int>(i), team, barrier);
      } catch (const TeamAborted&) {
        throw;
      } catch (...) {
        {
          std::lock_guard<std::mutex> lk(cause_mu);
          if (!cause) cause = std::current_exception();
        }
        barrier.abort();  // only now: members waiting for this one leave with TeamAborted
        throw;
      }
    };
    try {
      launch(team, task);
    } catch (...) {
      if (cause) std::rethrow_exception(cause);  // not the TeamAborted that may have come first
      throw;
    }
  }

 private:
  // Publishes a job to every worker, takes part in it, and waits for the workers; run_mu_ held.
  void launch(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = &fn;
      n_tasks_ = n_tasks;
      next_.store(0);
      pending_.store(static_cast<int>(workers_.size()));
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_work_.notify_all();
    drain();
    if (!spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_done_.wait(lk, [this] { return pending_.load() == 0; });
    }
    job_ = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));  // after all stopped
  }

  // Take task indices until none are left; used by the caller and by every worker. A task that
  // throws ends the job early (no new tasks start) and its exception reaches the caller.
  void drain() {
    t_inside_task = true;
    try {
      for (int64_t i = next_.fetch_add(1); i < n_tasks_; i = next_.fetch_add(1)) (*job_)(i);
    } catch (...) {
      next_.store(n_tasks_);
      std::lock_guard<std::mutex> lk(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    t_inside_task = false;
  }

  void worker_loop(uint64_t seen) {
    for (;;) {
      auto fresh = [&] {
        return stop_.load() || generation_.load(std::memory_order_acquire) != seen;
      };
      if (!spin_until(fresh)) {
        std::unique_lock<std::mutex> lk(mu_);
        cv_work_.wait(lk, fresh);
      }
      if (stop_.load()) return;
      seen = generation_.load(std::memory_order_acquire);
      drain();
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lk(mu_);  // pairs with the waiter's predicate check
        cv_done_.notify_one();
      }
    }
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_.store(true);
    }
    cv_work_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // one job at a time; a concurrent caller runs its job serially
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t n_tasks_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<int> pending_{0};  // workers that have not finished the current job
  std::mutex error_mu_;
  std::exception_ptr error_;  // the first exception a task of the current job threw
};

Pool& pool() {
  static Pool p(threads_from_env());
  return p;
}

}  // namespace

int usable_cpus() {
#ifdef __linux__
  // hardware_concurrency() counts the machine's CPUs, not the ones this process may run on:
  // under taskset, a container's cpuset or mpirun's binding to one core, that many threads
  // would share fewer cores and slow every GEMM down.
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0)
    return std::clamp(CPU_COUNT(&set), 1, kMaxThreads);
#endif
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, kMaxThreads);
}

int parse_thread_count(const char* text) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || v < 1 || v > kMaxThreads)
    throw std::invalid_argument(std::string("TAPEGRAD_THREADS='") + text +
                                "' is not a thread count: use an integer from 1 to " +
                                std::to_string(kMaxThreads));
  return static_cast<int>(v);
}

int num_threads() { return pool().size(); }

void set_num_threads(int n) {
  if (n < 1 || n > kMaxThreads)
    throw std::invalid_argument("set_num_threads(" + std::to_string(n) + "): need 1 to " +
                                std::to_string(kMaxThreads) + " threads");
  if (n != pool().size()) pool().resize(n);
}

void parallel_for(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
  if (n_tasks <= 0) return;
  pool().run(n_tasks, fn);
}

void parallel_team(int n, const std::function<void(int tid, int team, Barrier& barrier)>& fn) {
  pool().run_team(std::max(n, 1), fn);
}

void Barrier::arrive_and_wait() {
  const uint64_t gen = gen_.load(std::memory_order_acquire);
  if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
    count_.store(0, std::memory_order_relaxed);  // before the release below: reuse is safe
    gen_.fetch_add(1, std::memory_order_release);
    return;
  }
  while (gen_.load(std::memory_order_acquire) == gen) {
    if (aborted_.load(std::memory_order_acquire)) throw TeamAborted();
    std::this_thread::yield();
  }
}

}  // namespace tg
