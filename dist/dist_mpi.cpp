// dist.h on MPI (Open MPI). MPI starts only when a launcher started more than one process (or a
// PMIx launcher, which does not say how many), so a plain `tapegrad train` in this build never
// touches it. Byte blocks travel as MPI_BYTE; the one reduction, any(), is a max over ints. Every
// sum of floats is ours (train/data_parallel.h).
// The C API only: Open MPI's deprecated C++ bindings do not build with -Werror.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dist/dist.h"

namespace tg::dist {

namespace {

bool g_started = false;  // MPI_Init_thread ran (and MPI_Finalize has not)
int g_rank = 0, g_size = 1;
int g_timeout = kDefaultTimeout;  // TAPEGRAD_DIST_TIMEOUT, seconds; 0: no limit
// A duplicate of the world for what is not the program's own traffic: the notices of ranks that
// waited too long, and failed_together's barrier.
MPI_Comm g_side = MPI_COMM_NULL;
constexpr int kTagWaiting = 1;        // "I am waiting in a collective"
std::vector<char> g_heard, g_told;    // per rank: a notice came from it, one went to it
const int kNotice = 0;                // the notices' payload (they say it by their tag)
constexpr double kAnswerSeconds = 2;  // how long a rank that gave up listens for answers

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int count_of(size_t bytes) {
  if (bytes > size_t(INT_MAX))
    throw std::runtime_error("a message of " + std::to_string(bytes) +
                             " bytes is above MPI's 2 GiB per block");
  return int(bytes);
}

std::vector<int> counts_of(const std::vector<size_t>& v) {
  std::vector<int> out;
  for (size_t b : v) out.push_back(count_of(b));
  return out;
}

// Without a launcher (g_started false) the world is this process: a block to myself is a copy.
void copy_own_block(const void* from, void* to, size_t offset, size_t bytes) {
  std::memmove(static_cast<char*>(to) + offset, from, bytes);
}

void tell(int r) {
  if (g_told[size_t(r)]) return;
  g_told[size_t(r)] = 1;
  MPI_Request request;
  MPI_Isend(&kNotice, 1, MPI_INT, r, kTagWaiting, g_side, &request);
  MPI_Request_free(&request);
}

// Notices from ranks that gave up waiting: noted, and answered (this rank waits too).
void answer_notices() {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kTagWaiting, g_side, &flag, &st);
    if (!flag) return;
    int payload = 0;
    MPI_Recv(&payload, 1, MPI_INT, st.MPI_SOURCE, kTagWaiting, g_side, MPI_STATUS_IGNORE);
    g_heard[size_t(st.MPI_SOURCE)] = 1;
    tell(st.MPI_SOURCE);
  }
}

// The collective `what` waited g_timeout seconds: every rank is told, those waiting too answer
// within kAnswerSeconds, the others are the ones waited for. The lowest waiting rank says so.
[[noreturn]] void give_up(const char* what) {
  for (int r = 0; r < g_size; ++r)
    if (r != g_rank) tell(r);
  const Clock::time_point t = Clock::now();
  while (since(t) < kAnswerSeconds) {
    answer_notices();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::string missing;
  int first_waiting = g_rank, n = 0;
  for (int r = 0; r < g_size; ++r) {
    if (r == g_rank) continue;
    if (g_heard[size_t(r)]) first_waiting = std::min(first_waiting, r);
    if (!g_heard[size_t(r)]) missing += (n++ ? ", " : "") + std::to_string(r);
  }
  if (first_waiting == g_rank) {
    std::fprintf(stderr,
                 "tapegrad: rank %d waited %d s in %s for rank%s %s, which did not answer "
                 "(stopped or hung); ending the job (TAPEGRAD_DIST_TIMEOUT=%d)\n",
                 g_rank, g_timeout, what, n == 1 ? "" : "s", n ? missing.c_str() : "?", g_timeout);
    std::fflush(stderr);
    abort_all(1);
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(2 * kAnswerSeconds));
  abort_all(1);  // the rank that should have said it did not end the job
}

// Open MPI's blocking calls poll without pause. The exchange runs on the gradient thread while
// backward runs on the training thread: polling there took a core's share from backward for as
// long as the other ranks had not sent (gpt2-124m, 2 ranks x 1 thread on 2 cores: ~0.9 s of a
// 5.9 s step). So every collective starts non-blocking and is tested with a growing pause
// between tests, for at most TAPEGRAD_DIST_TIMEOUT seconds; it answers other ranks' notices
// meanwhile.
void wait_for(MPI_Request& request, const char* what) {
  const Clock::time_point t = Clock::now();
  for (int pause_us = 10;; pause_us = std::min(2 * pause_us, 1000)) {
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    answer_notices();
    if (g_timeout > 0 && since(t) > g_timeout) give_up(what);
    std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
  }
}

}  // namespace

bool built_with_mpi() { return true; }

void init() {
  if (g_started) return;
  g_timeout = timeout_from_env();  // before MPI starts: a bad value ends this rank alone
  if (!launch().needs_mpi()) return;
  int provided = 0;
  // SERIALIZED: the training thread and the gradient thread take turns, never at once.
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  if (provided < MPI_THREAD_SERIALIZED)
    throw std::runtime_error("the MPI library does not support MPI_THREAD_SERIALIZED");
  g_started = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  MPI_Comm_dup(MPI_COMM_WORLD, &g_side);
  g_heard.assign(size_t(g_size), 0);
  g_told.assign(size_t(g_size), 0);
  std::atexit(finalize);
}

void finalize() {
  if (!g_started) return;
  g_started = false;
  int done = 0;
  MPI_Finalized(&done);
  if (!done) MPI_Finalize();
}

void abort_all(int status) {
  if (g_started) MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);
}

bool failed_together(double seconds) {
  if (!g_started) return true;
  MPI_Request request;
  MPI_Ibarrier(g_side, &request);
  const Clock::time_point t = Clock::now();
  for (;;) {
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return true;
    if (since(t) > seconds) return false;  // the caller ends the job: the request stays
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

int rank() { return g_rank; }
int size() { return g_size; }

// In pieces of 1 GiB: a checkpoint with its moments is larger than one MPI count reaches.
void broadcast(void* data, size_t bytes, int root) {
  if (g_size == 1) return;
  constexpr size_t kPiece = size_t(1) << 30;
  for (size_t at = 0; at < bytes; at += kPiece) {
    MPI_Request request;
    MPI_Ibcast(static_cast<char*>(data) + at, count_of(std::min(kPiece, bytes - at)), MPI_BYTE,
               root, MPI_COMM_WORLD, &request);
    wait_for(request, "a broadcast");
  }
}

void broadcast(std::string& s, int root) {
  if (g_size == 1) return;
  uint64_t n = s.size();
  broadcast(&n, sizeof n, root);
  s.resize(n);
  broadcast(s.data(), n, root);
}

void exchange(const void* send, const std::vector<size_t>& send_bytes,
              const std::vector<size_t>& send_offsets, void* recv,
              const std::vector<size_t>& recv_bytes, const std::vector<size_t>& recv_offsets) {
  if (!g_started)
    return copy_own_block(static_cast<const char*>(send) + send_offsets[0], recv, recv_offsets[0],
                          send_bytes[0]);
  const std::vector<int> sc = counts_of(send_bytes), so = counts_of(send_offsets),
                         rc = counts_of(recv_bytes), ro = counts_of(recv_offsets);
  MPI_Request request;
  MPI_Ialltoallv(send, sc.data(), so.data(), MPI_BYTE, recv, rc.data(), ro.data(), MPI_BYTE,
                 MPI_COMM_WORLD, &request);
  wait_for(request, "an exchange");
}

void gather_all(const void* mine, void* all, const std::vector<size_t>& bytes,
                const std::vector<size_t>& offsets) {
  if (!g_started) return copy_own_block(mine, all, offsets[0], bytes[0]);
  const std::vector<int> c = counts_of(bytes), o = counts_of(offsets);
  const bool in_place = static_cast<const char*>(all) + offsets[size_t(g_rank)] == mine;
  MPI_Request request;
  MPI_Iallgatherv(in_place ? MPI_IN_PLACE : mine, c[size_t(g_rank)], MPI_BYTE, all, c.data(),
                  o.data(), MPI_BYTE, MPI_COMM_WORLD, &request);
  wait_for(request, "a gather");
}

void gather(const void* mine, void* all, const std::vector<size_t>& bytes,
            const std::vector<size_t>& offsets, int root) {
  if (!g_started) return copy_own_block(mine, all, offsets[0], bytes[0]);
  const std::vector<int> c = counts_of(bytes), o = counts_of(offsets);
  const bool in_place =
      g_rank == root && static_cast<const char*>(all) + offsets[size_t(g_rank)] == mine;
  MPI_Request request;
  MPI_Igatherv(in_place ? MPI_IN_PLACE : mine, c[size_t(g_rank)], MPI_BYTE, all, c.data(), o.data(),
               MPI_BYTE, root, MPI_COMM_WORLD, &request);
  wait_for(request, "a gather");
}

void barrier() {
  if (g_size == 1) return;
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  wait_for(request, "a barrier");
}

bool any(bool mine) {
  if (!g_started) return mine;
  int v = mine ? 1 : 0, out = 0;
  MPI_Request request;
  MPI_Iallreduce(&v, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &request);
  wait_for(request, "a vote");
  return out != 0;
}

}  // namespace tg::dist
