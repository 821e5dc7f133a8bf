// What both implementations of dist.h share: reading the launcher's environment.
#include <cstdlib>
#include <string>
#include <vector>

#include "train/dist.h"

namespace tg::dist {

namespace {

// A positive count from the environment, or 0 when absent or not a number.
long env_count(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' && n > 0 ? n : 0;
}

}  // namespace

int launcher_size() {
  // Open MPI's mpirun, then PMI-1/2 (Slurm's srun --mpi=pmi2, MPICH's hydra). Not SLURM_NTASKS:
  // a batch script's own shell has it too.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const long n = env_count(name);
    if (n > 0) return int(n);
  }
  // PMIx without a size in the environment: a rank above 0 means there is more than one.
  return env_count("PMIX_RANK") > 0 || env_count("PMI_RANK") > 0 ? 2 : 1;
}

void gather_all_equal(const void* mine, void* all, size_t bytes) {
  const size_t n = size_t(size());
  std::vector<size_t> sizes(n, bytes), offsets;
  for (size_t r = 0; r < n; ++r) offsets.push_back(r * bytes);
  gather_all(mine, all, sizes, offsets);
}

int local_size() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    const long n = env_count(name);
    if (n > 0) return int(n);
  }
  return size();
}

int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    const long r = env_count(name);
    if (r > 0) return int(r);
  }
  return 0;
}

}  // namespace tg::dist
