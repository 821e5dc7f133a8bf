// The processes of a data-parallel run, behind one small interface: rank, size, broadcast,
// exchange (all-to-all of byte blocks), gather, barrier and an agreed stop flag. Two
// implementations, chosen at build time: dist_mpi.cpp (Open MPI, meson option -Dmpi) and
// dist_single.cpp (one process; no dependency). Only these files know MPI exists.
//
// Every collective waits at most TAPEGRAD_DIST_TIMEOUT seconds (see timeout_from_env).
//
// No collective here combines floats: every sum over ranks is done by our code, in rank order
// (train/data_parallel.h), so the result does not depend on MPI's choice of algorithm.
//
// Not here: communicators other than the world, non-blocking calls, GPU buffers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tg::dist {

// What the launcher that started this process (mpirun, srun, MPICH's hydra) said in its
// environment.
struct Launch {
  int rank = 0;       // OMPI_COMM_WORLD_RANK, PMI_RANK or PMIX_RANK; 0 without a launcher
  int size = 1;       // the process count it announced; 0 when it announced none
  bool pmix = false;  // a PMIx launcher (srun --mpi=pmix): PMIX_RANK without an Open MPI size
  // MPI must start: several processes, or a PMIx launcher (MPI_Comm_size tells the count).
  bool needs_mpi() const { return pmix || size != 1; }
};
// Reads the launcher's variables through `env` (getenv's contract: null when unset), in this
// order: Open MPI's mpirun (OMPI_COMM_WORLD_SIZE), PMI-1/2 (PMI_SIZE: srun --mpi=pmi2, hydra),
// PMIx (PMIX_RANK, any value: srun --mpi=pmix sets no size; SLURM_STEP_NUM_TASKS, srun's task
// count, stands in when present). Not SLURM_NTASKS alone: a batch script's own shell has it too.
Launch read_launch(const std::function<const char*(const char*)>& env);
// read_launch of this process's environment.
Launch launch();

// Whether this build can run several processes (built with MPI).
bool built_with_mpi();

// Starts the world when launch().needs_mpi() (MPI_Init_thread, SERIALIZED; the size is then
// MPI_Comm_size's); otherwise the world is this one process and MPI is never touched. A build
// without MPI started as one of several processes throws std::runtime_error with one line (N
// copies would write one --out); a malformed TAPEGRAD_DIST_TIMEOUT throws std::invalid_argument
// before MPI starts.
// Safe to call more than once.
void init();
// MPI_Finalize when init() started MPI (the atexit handler does it too).
void finalize();
// Ends every process of the job at once with this exit status (MPI_Abort); exit() alone.
[[noreturn]] void abort_all(int status);
// After an error, on every rank that met it: true when every rank calls this within `seconds`
// (they all failed at one point, as an error read on rank 0 and shared is met: rank 0 may report
// it and all exit normally); false when some rank did not come (this rank failed alone: report
// it naming the rank, then abort_all). A barrier on a channel of its own, so a rank waiting in
// another collective cannot take part in it by mistake. One process: true.
bool failed_together(double seconds);

// How long one collective may wait for the other ranks: TAPEGRAD_DIST_TIMEOUT, whole seconds
// from 0 (no limit) to kMaxTimeout, default kDefaultTimeout. When it runs out the rank asks the
// others which of them are waiting too; the lowest waiting rank prints one line naming the
// ranks that did not answer (stopped, or stuck outside a collective) and the job ends
// (abort_all(1)). init() reads it, and refuses a malformed value (std::invalid_argument).
inline constexpr int kDefaultTimeout = 600, kMaxTimeout = 7 * 24 * 3600;
// TAPEGRAD_DIST_TIMEOUT's text as seconds, or std::invalid_argument quoting it and the range.
int parse_timeout(const char* text);
// The variable's value (kDefaultTimeout when unset or empty); std::invalid_argument if malformed.
int timeout_from_env();

int rank();
int size();
inline bool is_root() { return rank() == 0; }

// Rank root's bytes into every rank's buffer (bytes must agree on all ranks).
void broadcast(void* data, size_t bytes, int root = 0);
// Root's string to every rank (the others' is replaced).
void broadcast(std::string& s, int root = 0);
// All-to-all of byte blocks: block j of `send` (send_offsets[j], send_bytes[j]) goes to rank j;
// rank i's block for me lands at recv_offsets[i], recv_bytes[i]. Each vector has size() entries.
void exchange(const void* send, const std::vector<size_t>& send_bytes,
              const std::vector<size_t>& send_offsets, void* recv,
              const std::vector<size_t>& recv_bytes, const std::vector<size_t>& recv_offsets);
// Every rank's block, at offsets[r] with bytes[r], into every rank's `all` (allgather);
// `mine` is this rank's block (may alias its place in `all`).
void gather_all(const void* mine, void* all, const std::vector<size_t>& bytes,
                const std::vector<size_t>& offsets);
// gather_all of one block of `bytes` from each rank, rank r's at r * bytes.
void gather_all_equal(const void* mine, void* all, size_t bytes);
// Every rank's block to root only (the others' `all` is untouched).
void gather(const void* mine, void* all, const std::vector<size_t>& bytes,
            const std::vector<size_t>& offsets, int root = 0);
void barrier();
// True on every rank when any rank passed true (a stop requested on one stops all at the same
// step boundary).
bool any(bool mine);

}  // namespace tg::dist
