// What tests/test_dist runs under mpirun to see the DDP library (dist/ddp.h) refuse ranks that
// disagree: `ddp_probe MODE`, one small model per rank, a forward, backward and reduce_gradients.
// Modes: same (both ranks alike: must pass), shapes (rank 1 has Linear(3, 2) where rank 0 has
// Linear(2, 3)), bias (a bias on rank 1 only), no-grad (rank 1 skips backward), no-init (no
// dist::init()). Prints "ddp_probe: <what()>" from rank 0 (the launcher's, without init) and
// exits 1 when the library throws; prints "ddp_probe: done" and exits 0 otherwise.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "core/autograd.h"
#include "core/ops.h"
#include "dist/ddp.h"
#include "dist/dist.h"
#include "nn/linear.h"

using namespace tg;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "same";
  const int me = dist::launch().rank;
  try {
    if (mode != "no-init") dist::init();
    const bool odd = me == 1;
    nn::Linear model(odd && mode == "shapes" ? 3 : 2, odd && mode == "shapes" ? 2 : 3,
                     mode != "bias" || odd);
    dist::DistributedDataParallel ddp(model);
    const Tensor x = ones({4, model.weight.shape()[1]});
    if (!(odd && mode == "no-grad")) sum(ddp.forward(x)).backward();
    ddp.reduce_gradients();
  } catch (const std::exception& e) {
    if (me == 0) std::fprintf(stderr, "ddp_probe: %s\n", e.what());
    return 1;
  }
  if (me == 0) std::printf("ddp_probe: done\n");
  return 0;
}
