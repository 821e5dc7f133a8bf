// Persistent thread pool: workers sleep on a condition variable between jobs; each job hands out
// task indices through one atomic counter, so load balance is dynamic but results never depend on
// it (every task writes its own disjoint outputs).
#include "core/threadpool.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tg {

namespace {

int threads_from_env() {
  const char* s = std::getenv("TAPEGRAD_THREADS");
  if (s == nullptr || *s == '\0') {
    const unsigned hc = std::thread::hardware_concurrency();
    return hc == 0 ? 1 : static_cast<int>(hc);
  }
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (*end != '\0' || v < 1 || v > 1024)
    throw std::invalid_argument(std::string("TAPEGRAD_THREADS='") + s +
                                "' is not a thread count: use a positive integer such as 2");
  return static_cast<int>(v);
}

thread_local bool t_inside_task = false;

class Pool {
 public:
  explicit Pool(int n) { resize(n); }
  ~Pool() { stop_workers(); }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int n) {
    stop_workers();
    stop_ = false;
    for (int i = 0; i + 1 < n; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  void run(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (workers_.empty() || n_tasks == 1 || t_inside_task || !busy.owns_lock()) {
      for (int64_t i = 0; i < n_tasks; ++i) fn(i);
      return;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = &fn;
      n_tasks_ = n_tasks;
      next_.store(0);
      pending_ = static_cast<int>(workers_.size());
      ++generation_;
    }
    cv_work_.notify_all();
    drain();
    std::unique_lock<std::mutex> lk(mu_);
    cv_done_.wait(lk, [this] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  // Take task indices until none are left; used by the caller and by every worker.
  void drain() {
    t_inside_task = true;
    for (int64_t i = next_.fetch_add(1); i < n_tasks_; i = next_.fetch_add(1)) (*job_)(i);
    t_inside_task = false;
  }

  void worker_loop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_work_.wait(lk, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      drain();
      std::lock_guard<std::mutex> lk(mu_);
      if (--pending_ == 0) cv_done_.notify_one();
    }
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_work_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // one job at a time; a concurrent caller runs its job serially
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t n_tasks_ = 0;
  std::atomic<int64_t> next_{0};
  int pending_ = 0;
};

Pool& pool() {
  static Pool p(threads_from_env());
  return p;
}

}  // namespace

int num_threads() { return pool().size(); }

void set_num_threads(int n) {
  if (n < 1) throw std::invalid_argument("set_num_threads(" + std::to_string(n) + "): need >= 1");
  if (n != pool().size()) pool().resize(n);
}

void parallel_for(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
  if (n_tasks <= 0) return;
  pool().run(n_tasks, fn);
}

}  // namespace tg
