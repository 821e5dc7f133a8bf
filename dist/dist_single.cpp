// dist.h for a build without MPI: the world is this one process. Under a launcher that started
// several copies, init() refuses: each copy would train alone and all would write one --out.
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "dist/dist.h"

namespace tg::dist {

bool built_with_mpi() { return false; }

void init() {
  timeout_from_env();  // refused here as in a build with MPI
  const Launch l = launch();
  // A PMIx rank 0 that was told no count may be alone (srun -n 1 without Slurm's count): it runs.
  if (l.size == 1 || (l.size == 0 && l.rank == 0)) return;
  const std::string count = l.size > 1 ? std::to_string(l.size) : "several";
  throw std::runtime_error("started as one of " + count +
                           " processes by an MPI launcher, but this tapegrad was built without "
                           "MPI (rebuild with Open MPI: meson setup -Dmpi=enabled)");
}
void finalize() {}
void abort_all(int status) { std::_Exit(status); }
bool failed_together(double) { return true; }

int rank() { return 0; }
int size() { return 1; }

void broadcast(void*, size_t, int) {}
void broadcast(std::string&, int) {}

// One rank: the block for myself is the whole exchange.
void exchange(const void* send, const std::vector<size_t>& send_bytes,
              const std::vector<size_t>& send_offsets, void* recv, const std::vector<size_t>&,
              const std::vector<size_t>& recv_offsets) {
  std::memmove(static_cast<char*>(recv) + recv_offsets[0],
               static_cast<const char*>(send) + send_offsets[0], send_bytes[0]);
}
void gather_all(const void* mine, void* all, const std::vector<size_t>& bytes,
                const std::vector<size_t>& offsets) {
  std::memmove(static_cast<char*>(all) + offsets[0], mine, bytes[0]);
}
void gather(const void* mine, void* all, const std::vector<size_t>& bytes,
            const std::vector<size_t>& offsets, int) {
  gather_all(mine, all, bytes, offsets);
}
void barrier() {}
bool any(bool mine) { return mine; }

}  // namespace tg::dist
