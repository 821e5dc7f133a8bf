// Data-parallel training (train/data_parallel.h, dist/dist.h): the reduction's order, the flat
// layout, micro-batches against the book's one batch, and the promise itself: `mpirun -np N
// tapegrad train` prints the log and writes the checkpoint tensors of `tapegrad train
// --micro-batches N`, and a checkpoint resumes under another process count to the same bits.
// The mpirun cases need a build with MPI and mpirun on PATH; without them they say so and pass.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "dist/ddp.h"
#include "dist/dist.h"
#include "train/data_parallel.h"
#include "train/dist_setup.h"
#include "train_testing.h"

using namespace tg;
using namespace tg::train;
using tg::dist::DistributedSampler;
using tg::dist::FlatLayout;
using tg::dist::sum_in_order;
namespace fs = std::filesystem;

TEST_CASE("sum_in_order adds the parts in the order given") {
  // 1 + 1e8 rounds back to 1e8 in float, so the order shows in the result.
  const std::vector<float> a = {1.0f, 2.0f}, b = {1e8f, 3.0f}, c = {-1e8f, 4.0f};
  std::vector<float> out(2);
  const float* parts[] = {a.data(), b.data(), c.data()};
  sum_in_order(parts, out.data(), 2);
  CHECK(out[0] == 0.0f);  // (1 + 1e8) - 1e8
  CHECK(out[1] == 9.0f);
  const float* reversed[] = {c.data(), b.data(), a.data()};
  sum_in_order(reversed, out.data(), 2);
  CHECK(out[0] == 1.0f);  // (-1e8 + 1e8) + 1
  // In place: out is the first part.
  std::vector<float> acc = a;
  const float* onto[] = {acc.data(), b.data()};
  sum_in_order(onto, acc.data(), 2);
  CHECK(acc == std::vector<float>{1e8f, 5.0f});
}

TEST_CASE("FlatLayout: shards tile the flat vector and pieces follow the parameters") {
  const std::vector<Tensor> params = {zeros({3}), zeros({2, 2}), zeros({5})};  // 12 elements
  const FlatLayout l(params, 3);
  CHECK(l.numel() == 12);
  CHECK(l.begin(0) == 0);
  CHECK(l.end(0) == 4);
  CHECK(l.begin(1) == 4);
  CHECK(l.end(2) == 12);
  std::vector<std::vector<int64_t>> pieces;
  l.for_range(2, 8, [&](size_t k, int64_t in_param, int64_t at, int64_t n) {
    pieces.push_back({int64_t(k), in_param, at, n});
  });
  const std::vector<std::vector<int64_t>> want = {{0, 2, 2, 1}, {1, 0, 3, 4}, {2, 0, 7, 1}};
  CHECK(pieces == want);
  for (const int parts : {0, -1})
    CHECK_THROWS_WITH(
        FlatLayout(params, parts),
        ("FlatLayout: parts must be at least 1, got " + std::to_string(parts)).c_str());
}

namespace {

// The trainer tests' small GPT, with this dropout.
nn::GPTConfig small_config(double drop_rate) {
  nn::GPTConfig c = testing::small_config();
  c.drop_rate = drop_rate;
  return c;
}

data::Batch small_batch(int64_t B, int64_t T) {
  data::Batch b;
  b.batch_size = B, b.max_length = T;
  for (int64_t i = 0; i < B * T; ++i) {
    b.inputs.push_back((i * 7 + 3) % 32);
    b.targets.push_back((i * 5 + 1) % 32);
  }
  return b;
}

std::vector<std::vector<float>> grads_of(const nn::GPTModel& m) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.grad().contiguous().to_vector<float>());
  return out;
}

}  // namespace

TEST_CASE("micro-batches: the gradient of the global batch's mean, summed in order") {
  const data::Batch batch = small_batch(4, 8);
  manual_seed(1);
  nn::GPTModel model(small_config(0.0));
  // The book's step: one batch.
  model.zero_grad();
  const Tensor x = from_vector(batch.inputs, {4, 8}), y = from_vector(batch.targets, {4, 8});
  const Tensor loss = calc_loss_batch(x, y, model);
  loss.backward();
  const auto whole = grads_of(model);
  // Two micro-batches by hand: each loss scaled by 1/2, gradients added in order.
  std::vector<std::vector<float>> by_hand;
  double mean = 0;
  for (int k = 0; k < 2; ++k) {
    model.zero_grad();
    const std::vector<int64_t> xi(batch.inputs.begin() + k * 16,
                                  batch.inputs.begin() + k * 16 + 16);
    const std::vector<int64_t> yi(batch.targets.begin() + k * 16,
                                  batch.targets.begin() + k * 16 + 16);
    const Tensor l = calc_loss_batch(from_vector(xi, {2, 8}), from_vector(yi, {2, 8}), model);
    mean += l.item<double>() / 2;
    (l * 0.5).backward();
    const auto g = grads_of(model);
    if (k == 0) by_hand = g;
    for (size_t p = 0; k == 1 && p < g.size(); ++p)
      for (size_t i = 0; i < g[p].size(); ++i) by_hand[p][i] += g[p][i];
  }
  DataParallelStep step(model, 2, false);
  model.zero_grad();
  CHECK(step.loss_and_backward(batch, model) == mean);
  const auto got = grads_of(model);
  CHECK(got == by_hand);
  // ... and the same gradient as one batch's, to rounding.
  double worst = 0;
  for (size_t p = 0; p < got.size(); ++p)
    for (size_t i = 0; i < got[p].size(); ++i)
      worst = std::max(worst, double(std::abs(got[p][i] - whole[p][i])));
  CHECK(worst < 1e-6);
  CHECK(std::abs(mean - loss.item<double>()) < 1e-6);
}

TEST_CASE("micro-batches draw as many dropout words as the whole batch's forward") {
  const data::Batch batch = small_batch(4, 8);
  manual_seed(2);
  nn::GPTModel model(small_config(0.1));
  const uint64_t before = default_generator().words_drawn();
  model(from_vector(batch.inputs, {4, 8}));
  const uint64_t whole = default_generator().words_drawn() - before;
  CHECK(whole > 0);
  DataParallelStep step(model, 4, false);
  model.zero_grad();
  const uint64_t at = default_generator().words_drawn();
  step.loss_and_backward(batch, model);
  CHECK(default_generator().words_drawn() - at == whole);
}

TEST_CASE("read_launch: which launcher started us, from its environment") {
  struct Row {
    const char* who;
    std::vector<std::pair<const char*, const char*>> env;
    int rank, size;
    bool pmix, needs_mpi;
  };
  const std::vector<Row> rows = {
      {"no launcher", {}, 0, 1, false, false},
      {"a batch script's shell", {{"SLURM_NTASKS", "4"}}, 0, 1, false, false},
      {"mpirun -np 1",
       {{"OMPI_COMM_WORLD_SIZE", "1"}, {"OMPI_COMM_WORLD_RANK", "0"}, {"PMIX_RANK", "0"}},
       0,
       1,
       false,
       false},
      {"mpirun -np 2",
       {{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"PMIX_RANK", "1"}},
       1,
       2,
       false,
       true},
      {"srun --mpi=pmi2, hydra", {{"PMI_SIZE", "3"}, {"PMI_RANK", "2"}}, 2, 3, false, true},
      {"srun --mpi=pmix: rank 0 starts MPI too", {{"PMIX_RANK", "0"}}, 0, 0, true, true},
      {"srun --mpi=pmix, rank 1", {{"PMIX_RANK", "1"}}, 1, 0, true, true},
      {"srun --mpi=pmix -n 4",
       {{"PMIX_RANK", "0"}, {"SLURM_STEP_NUM_TASKS", "4"}},
       0,
       4,
       true,
       true},
      {"srun --mpi=pmix -n 1",
       {{"PMIX_RANK", "0"}, {"SLURM_STEP_NUM_TASKS", "1"}},
       0,
       1,
       true,
       true},
      {"a PMI rank without a count", {{"PMI_RANK", "2"}}, 2, 0, false, true},
      {"PMI rank 0 without a count", {{"PMI_RANK", "0"}}, 0, 1, false, false},
      {"not numbers", {{"OMPI_COMM_WORLD_SIZE", "two"}, {"PMIX_RANK", "x"}}, 0, 1, false, false},
      {"size 0", {{"OMPI_COMM_WORLD_SIZE", "0"}}, 0, 1, false, false},
      {"empty", {{"PMIX_RANK", ""}}, 0, 1, false, false},
  };
  for (const Row& row : rows) {
    CAPTURE(row.who);
    const dist::Launch l = dist::read_launch([&](const char* name) -> const char* {
      for (const auto& [k, v] : row.env)
        if (std::strcmp(k, name) == 0) return v;
      return nullptr;
    });
    CHECK(l.rank == row.rank);
    CHECK(l.size == row.size);
    CHECK(l.pmix == row.pmix);
    CHECK(l.needs_mpi() == row.needs_mpi);
  }
}

TEST_CASE("threads_for: a rank's cores, shared with the ranks bound alike on its machine") {
  const auto ranks = [](std::vector<std::vector<int64_t>> hmc) {  // host, mask, cpus per rank
    std::vector<CpuShare> out;
    for (const auto& r : hmc) out.push_back({uint64_t(r[0]), uint64_t(r[1]), r[2]});
    return out;
  };
  // mpirun's default at two ranks: each bound to its own core.
  CHECK(threads_for(ranks({{1, 10, 1}, {1, 11, 1}}), 0) == 1);
  // --bind-to none on a 32-core machine: all see the 32 cores, and share them.
  const auto unbound = ranks({{1, 7, 32}, {1, 7, 32}, {1, 7, 32}, {1, 7, 32}});
  for (int r = 0; r < 4; ++r) CHECK(threads_for(unbound, r) == 8);
  // --bind-to socket: two sockets of 16 cores, two ranks on each.
  const auto sockets = ranks({{1, 1, 16}, {1, 1, 16}, {1, 2, 16}, {1, 2, 16}});
  CHECK(threads_for(sockets, 0) == 8);
  CHECK(threads_for(sockets, 3) == 8);
  // Two machines, one rank each, the same mask: nothing shared.
  CHECK(threads_for(ranks({{1, 7, 32}, {2, 7, 32}}), 1) == 32);
  // More ranks than cores: one thread each, never none.
  CHECK(threads_for(ranks({{1, 7, 2}, {1, 7, 2}, {1, 7, 2}}), 2) == 1);
  // One process: its mask (taskset -c 0: 1).
  CHECK(threads_for(ranks({{1, 3, 1}}), 0) == 1);
}

// ---- the promise, through mpirun ------------------------------------------------------------

namespace {

bool have_mpirun() {
  return dist::built_with_mpi() && std::system("command -v mpirun > /dev/null 2>&1") == 0;
}

int run(const std::string& cmd) {
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Dir {
  fs::path path = fs::temp_directory_path() / ("tapegrad_test_dist_" + std::to_string(::getpid()));
  Dir() {
    fs::remove_all(path);
    fs::create_directories(path);
    // mpirun as root needs both; --oversubscribe lets 4 ranks share 2 cores.
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  ~Dir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

const std::string kExe = TG_TAPEGRAD_EXE;
const std::string kMpirun = "ASAN_OPTIONS=detect_leaks=0 mpirun --oversubscribe ";
const std::string kTiny =
    " train --preset tiny --context 32 --epochs 1 --eval-freq 2 --eval-iter 3 --sample-tokens 4"
    " --threads 1 --no-progress";

std::string bytes(const Tensor& t) {
  const size_t n = size_t(t.numel()) * dtype_size(t.dtype());
  switch (t.dtype()) {
    case DType::Float32:
      return std::string(reinterpret_cast<const char*>(t.data<float>()), n);
    case DType::Float64:
      return std::string(reinterpret_cast<const char*>(t.data<double>()), n);
    case DType::Int64:
      return std::string(reinterpret_cast<const char*>(t.data<int64_t>()), n);
    case DType::Bool:
      return std::string(reinterpret_cast<const char*>(t.data<bool>()), n);
    case DType::BFloat16:
      return std::string(reinterpret_cast<const char*>(t.data<bfloat16>()), n);
  }
  return "";
}

// Tensors byte for byte, and the metadata but the timings.
void check_same_checkpoint(const std::string& a, const std::string& b) {
  const SafeTensors x = load_safetensors(a), y = load_safetensors(b);
  REQUIRE(x.tensors.size() == y.tensors.size());
  int differ = 0;  // tensors whose bytes differ, and the first of them
  std::string first;
  for (size_t i = 0; i < x.tensors.size(); ++i) {
    const auto& [name, s] = x.tensors[i];
    const Tensor& t = y.tensors[i].second;
    if (name != y.tensors[i].first || s.shape() != t.shape() || s.dtype() != t.dtype() ||
        bytes(s) != bytes(t))
      if (differ++ == 0) first = name;
  }
  CAPTURE(first);
  CHECK(differ == 0);
  for (const char* key :
       {"rng_state", "optimizer_step", "global_step", "tokens_seen", "options", "epoch", "batch"}) {
    CAPTURE(key);
    CHECK(x.metadata.at(key) == y.metadata.at(key));
  }
}

// The same run twice, `one` (one process) and `many` (under mpirun), into DIRs a and b, each
// with its log: both logs reach step 2 and are equal, and so are the checkpoints.
void check_same_run(const std::string& one, const std::string& many, const std::string& a,
                    const std::string& b) {
  REQUIRE(run(one + " --out " + a + " > " + a + ".log 2> /dev/null") == 0);
  REQUIRE(run(many + " --out " + b + " > " + b + ".log 2> /dev/null") == 0);
  CHECK(slurp(a + ".log").find("Ep 1 (Step 000002)") != std::string::npos);
  CHECK(slurp(a + ".log") == slurp(b + ".log"));
  check_same_checkpoint(a + "/checkpoint.safetensors", b + "/checkpoint.safetensors");
}

// The rows of a multi-rank table this build runs: all of them in release; under AddressSanitizer
// (every rank ~5x slower) the one named, the row that exercises the most code (make test's 15
// minutes). Said in the test's output, so a reader sees which rows ran.
template <class Row>
std::vector<Row> rows_for_build(std::vector<Row> rows, size_t asan_row) {
#if defined(TG_UNDER_ASAN)
  MESSAGE("AddressSanitizer build: row " << asan_row + 1 << " of " << rows.size()
                                         << " only (the release build runs every row)");
  return {rows.at(asan_row)};
#else
  (void)asan_row;
  return rows;
#endif
}

// Cases that check what mpirun and the processes do (refusals, failures, resumes across process
// counts, cores), not memory: the release build runs them; under AddressSanitizer (every rank ~5x
// slower) they took 3 of the sanitizer run's 7 minutes, while the code they reach runs there in
// the cases left (the promise's own row, DDP's checks, the pieces in-process).
bool release_only() {
#if defined(TG_UNDER_ASAN)
  return true;
#else
  return false;
#endif
}

}  // namespace

TEST_CASE("mpirun -np N gives --micro-batches N's log and checkpoint, N = 2, 3, 4") {
  if (!have_mpirun()) {
    MESSAGE("skipped: this build has no MPI or mpirun is missing");
    return;
  }
  const Dir d;
  for (const int n : rows_for_build<int>({2, 3, 4}, 1)) {
    CAPTURE(n);
    // 3 ranks also clip, which gathers the whole reduced gradient on every rank.
    const std::string opts = kTiny + " --batch-size " + std::to_string(n == 3 ? 6 : 4) +
                             " --max-steps 4" + (n == 3 ? " --clip-grad 0.5" : "");
    const std::string one = d / ("one" + std::to_string(n)),
                      many = d / ("many" + std::to_string(n));
    // Gradients leave in buckets while backward runs: one bucket (2 ranks), buckets of 50 KB
    // (3), or after backward (4).
    const std::string bucket_mb = n == 2 ? "25" : n == 3 ? "0.05" : "0";
    check_same_run(kExe + opts + " --micro-batches " + std::to_string(n),
                   kMpirun + "-x TAPEGRAD_BUCKET_MB=" + bucket_mb + " -np " + std::to_string(n) +
                       " " + kExe + opts,
                   one, many);
  }
}

// --pad-vocab changes no number under mpirun either: the padded rows' zero gradients travel in
// the exchange (the flat gradient is longer) and their AdamW shards stay 0; clipping gathers them.
TEST_CASE("mpirun -np 2 --pad-vocab 100 gives one unpadded process's log and checkpoint" *
          doctest::skip(release_only())) {
  if (!have_mpirun()) {
    MESSAGE("skipped: this build has no MPI or mpirun is missing");
    return;
  }
  const Dir d;
  const std::string opts = kTiny + " --batch-size 4 --max-steps 4 --clip-grad 0.5";
  check_same_run(kExe + opts + " --micro-batches 2",
                 kMpirun + "-np 2 " + kExe + opts + " --pad-vocab 100", d / "one", d / "many");
}

// --precision bf16 (autocast): one process reads its parameters' bf16 copies, which AdamW rounds
// in its own pass (core/ops/update.cpp), while ranks update shards and cast afresh; the casts'
// bits are the same, so the promise holds.
TEST_CASE("mpirun -np 2 --precision bf16 gives --micro-batches 2's log and checkpoint" *
          doctest::skip(release_only())) {
  if (!have_mpirun()) {
    MESSAGE("skipped: this build has no MPI or mpirun is missing");
    return;
  }
  const Dir d;
  const std::string opts = kTiny + " --batch-size 4 --max-steps 4 --precision bf16";
  check_same_run(kExe + opts + " --micro-batches 2", kMpirun + "-np 2 " + kExe + opts, d / "one",
                 d / "many");
}

// Several micro-batches per rank (K/N > 1): rank r computes micro-batches r*K/N .. (r+1)*K/N - 1,
// and the K gradients must still be added in micro-batch order, as one process adds them.
TEST_CASE("mpirun -np N --micro-batches K (K/N > 1) gives one process's --micro-batches K" *
          doctest::skip(release_only())) {
  if (!have_mpirun()) {
    MESSAGE("skipped: this build has no MPI or mpirun is missing");
    return;
  }
  const Dir d;
  struct Row {
    int n, k;
  };
  for (const Row row : rows_for_build<Row>({{2, 4}, {3, 6}, {2, 6}, {4, 8}}, 1)) {
    const std::string nk = std::to_string(row.n) + "_" + std::to_string(row.k);
    CAPTURE(nk);
    // Clipping (3 ranks) gathers the whole reduced gradient on every rank.
    const std::string opts = kTiny + " --batch-size " + std::to_string(row.k) + " --max-steps 3" +
                             (row.n == 3 ? " --clip-grad 0.5" : "") + " --micro-batches " +
                             std::to_string(row.k);
    const std::string one = d / ("one" + nk), many = d / ("many" + nk);
    check_same_run(kExe + opts, kMpirun + "-np " + std::to_string(row.n) + " " + kExe + opts, one,
                   many);
  }
}

TEST_CASE("a checkpoint of K = 4 micro-batches resumes from N ranks under N' to the same bits" *
          doctest::skip(release_only())) {
  if (!have_mpirun()) {
    MESSAGE("skipped: this build has no MPI or mpirun is missing");
    return;
  }
  const Dir d;
  const std::string opts = kTiny + " --batch-size 4 --micro-batches 4";
  REQUIRE(run(kExe + opts + " --max-steps 6 --out " + (d / "whole") + " > /dev/null 2>&1") == 0);
  const auto launch = [&](int n) {
    return n == 1 ? kExe : kMpirun + "-np " + std::to_string(n) + " " + kExe;
  };
  struct Row {
    int before, after;
  };
  for (const Row row : rows_for_build<Row>({{4, 2}, {2, 1}, {1, 2}}, 0)) {
    const std::string name = std::to_string(row.before) + "to" + std::to_string(row.after);
    CAPTURE(name);
    REQUIRE(run(launch(row.before) + opts + " --max-steps 3 --out " + (d / name) +
                " > /dev/null 2>&1") == 0);
    REQUIRE(run(launch(row.after) + " train --resume " + (d / name) +
                " --max-steps 3 > /dev/null 2>&1") == 0);
    check_same_checkpoint(d / "whole/checkpoint.safetensors",
                          d / (name + "/checkpoint.safetensors"));
  }
}

TEST_CASE("a checkpoint resumes under another process count to the uninterrupted run's bits" *
          doctest::skip(release_only())) {
  if (!have_mpirun()) {
    MESSAGE("skipped: this build has no MPI or mpirun is missing");
    return;
  }
  const Dir d;
  const std::string opts = kTiny + " --batch-size 4";
  REQUIRE(run(kExe + opts + " --micro-batches 2 --max-steps 8 --out " + (d / "whole") +
              " > /dev/null 2>&1") == 0);
  // 2 ranks, then 1 process; 1 process, then 2 ranks.
  REQUIRE(run(kMpirun + "-np 2 " + kExe + opts + " --max-steps 4 --out " + (d / "a") +
              " > /dev/null 2>&1") == 0);
  REQUIRE(run(kExe + " train --resume " + (d / "a") + " --max-steps 4 > /dev/null 2>&1") == 0);
  check_same_checkpoint(d / "whole/checkpoint.safetensors", d / "a/checkpoint.safetensors");
  REQUIRE(run(kExe + opts + " --micro-batches 2 --max-steps 4 --out " + (d / "b") +
              " > /dev/null 2>&1") == 0);
  REQUIRE(run(kMpirun + "-np 2 " + kExe + " train --resume " + (d / "b") +
              " --max-steps 4 > /dev/null 2>&1") == 0);
  check_same_checkpoint(d / "whole/checkpoint.safetensors", d / "b/checkpoint.safetensors");
  // 4 ranks cannot share the checkpoint's 2 micro-batches.
  CHECK(run(kMpirun + "-np 4 " + kExe + " train --resume " + (d / "b") + " > /dev/null 2> " +
            (d / "err")) == 2);
  CHECK(slurp(d / "err").find("tapegrad train: --micro-batches 2 (the checkpoint's) does not "
                              "split among 4 processes; give a multiple of 4\n") == 0);
}

TEST_CASE("mpirun refusals: a batch the ranks do not divide, ranks with other options" *
          doctest::skip(release_only())) {
  if (!have_mpirun()) {
    MESSAGE("skipped: this build has no MPI or mpirun is missing");
    return;
  }
  const Dir d;
  CHECK(run(kMpirun + "-np 3 " + kExe + kTiny + " --batch-size 4 --out " + (d / "x") +
            " > /dev/null 2> " + (d / "err")) == 2);
  CHECK(slurp(d / "err").find("tapegrad train: --batch-size 4 does not split among 3 processes; "
                              "give a multiple of 3\n") == 0);
  CHECK_FALSE(fs::exists(d / "x"));
  // The values as typed (5e-4), not as stored (0.00050000000000000001).
  CHECK(run(kMpirun + "-np 1 " + kExe + kTiny + " --lr 4e-4 --out " + (d / "y") + " : -np 1 " +
            kExe + kTiny + " --lr 5e-4 --out " + (d / "y") + " > /dev/null 2> " + (d / "err")) ==
        2);
  CHECK(slurp(d / "err").find("tapegrad train: rank 1 has --lr 5e-4, rank 0 has 4e-4; every "
                              "rank must run with the same options\n") == 0);
  CHECK_FALSE(fs::exists(d / "y"));
  // Ranks that pad the vocabulary differently would exchange gradients of other lengths.
  CHECK(run(kMpirun + "-np 1 " + kExe + kTiny + " --pad-vocab 64 --out " + (d / "p") + " : -np 1 " +
            kExe + kTiny + " --out " + (d / "p") + " > /dev/null 2> " + (d / "err")) == 2);
  CHECK(slurp(d / "err").find("tapegrad train: rank 1 has --pad-vocab 1, rank 0 has 64; every "
                              "rank must run with the same options\n") == 0);
  CHECK_FALSE(fs::exists(d / "p"));
  // bf16-pure's gradients are bf16; the exchange between ranks is float32.
  CHECK(run(kMpirun + "-np 2 " + kExe + kTiny + " --precision bf16-pure --out " + (d / "z") +
            " > /dev/null 2> " + (d / "err")) == 2);
  CHECK(slurp(d / "err").find("tapegrad train: --precision bf16-pure runs one micro-batch in one "
                              "process, not under mpirun -np 2\n") == 0);
  CHECK_FALSE(fs::exists(d / "z"));
}

namespace {

// The pool size a run of `launch` + tapegrad train without --threads recorded in its checkpoint.
std::string default_threads_of(const Dir& d, const std::string& launch, const std::string& name) {
  const std::string cmd = "env -u TAPEGRAD_THREADS " + launch + kExe +
                          " train --preset tiny --context 32 --epochs 1 --eval-freq 2 "
                          "--eval-iter 1 --sample-tokens 1 --batch-size 4 --max-steps 1 "
                          "--no-progress --out " +
                          (d / name) + " > /dev/null 2> " + (d / (name + ".err"));
  if (run(cmd) != 0) return "failed: " + slurp(d / (name + ".err"));
  return load_safetensors(d / (name + "/checkpoint.safetensors")).metadata.at("threads");
}

}  // namespace

TEST_CASE("without --threads a run takes the cores its affinity allows, shared by ranks alike" *
          doctest::skip(release_only())) {
  if (std::system("command -v taskset > /dev/null 2>&1") != 0) {
    MESSAGE("skipped: no taskset");
    return;
  }
  cpu_set_t mine;
  REQUIRE(::sched_getaffinity(0, sizeof mine, &mine) == 0);
  int first = 0;
  while (!CPU_ISSET(first, &mine)) ++first;
  const Dir d;
  // One core allowed: one thread, not a pool of the machine's cores.
  CHECK(default_threads_of(d, "taskset -c " + std::to_string(first) + " ", "one_core") == "1");
  CHECK(default_threads_of(d, "", "all") == std::to_string(CPU_COUNT(&mine)));
  if (!have_mpirun()) return;
  // mpirun binds each of two ranks to a core of its own; unbound, they share this process's.
  CHECK(default_threads_of(d, kMpirun + "-np 2 --bind-to core ", "bound") == "1");
  CHECK(default_threads_of(d, kMpirun + "-np 2 --bind-to none ", "unbound") ==
        std::to_string(std::max(1, CPU_COUNT(&mine) / 2)));
}

TEST_CASE("a build without MPI refuses to run as one of several launched processes") {
  if (dist::built_with_mpi()) {
    MESSAGE("skipped: this build has MPI");
    return;
  }
  const Dir d;
  CHECK(run("OMPI_COMM_WORLD_SIZE=3 OMPI_COMM_WORLD_RANK=0 " + kExe + kTiny + " --out " +
            (d / "x") + " > /dev/null 2> " + (d / "err")) == 1);
  CHECK(slurp(d / "err") ==
        "tapegrad train: started as one of 3 processes by an MPI launcher, but this tapegrad was "
        "built without MPI (rebuild with Open MPI: meson setup -Dmpi=enabled)\n");
  // The other copies refuse too, without repeating the line.
  CHECK(run("PMI_SIZE=3 PMI_RANK=2 " + kExe + kTiny + " --out " + (d / "x") + " > /dev/null 2> " +
            (d / "err")) == 1);
  CHECK(slurp(d / "err").empty());
  CHECK(run("PMIX_RANK=1 " + kExe + kTiny + " --out " + (d / "x") + " > /dev/null 2>&1") == 1);
  // srun --mpi=pmix -n 2: rank 0 too, told the count by Slurm.
  CHECK(run("PMIX_RANK=0 SLURM_STEP_NUM_TASKS=2 " + kExe + kTiny + " --out " + (d / "x") +
            " > /dev/null 2> " + (d / "err")) == 1);
  CHECK(slurp(d / "err").find("tapegrad train: started as one of 2 processes") == 0);
  CHECK_FALSE(fs::exists(d / "x"));
  CHECK(dist::launch().size == 1);
}

// ---- what one rank alone can do to a job, and what the ranks must agree on -----------------

namespace {

// The lines of `text` that tapegrad (or a probe) printed: those starting with `prefix`.
std::vector<std::string> lines_from(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  return out;
}

// `cmd` under a limit of `limit` seconds (a hang ends as 124), its exit status, seconds and stderr.
struct Outcome {
  int status;
  double seconds;
  std::string err;
};
Outcome run_bounded(const Dir& d, const std::string& cmd, int limit = 30) {
  const auto t0 = std::chrono::steady_clock::now();
  const int status =
      run("timeout " + std::to_string(limit) + " env " + cmd + " > /dev/null 2> " + (d / "err"));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {status, s, slurp(d / "err")};
}

// A setting as rank 0 shows it when its environment does not set it.
std::string unset_shown(const char* name, const std::string& value) {
  const char* v = std::getenv(name);
  return value + (v && *v ? "" : " (unset)");
}

}  // namespace

TEST_CASE("mpirun: one rank's own failure or setting ends the job within seconds, in one line" *
          doctest::skip(release_only())) {
  if (!have_mpirun()) {
    MESSAGE("skipped: this build has no MPI or mpirun is missing");
    return;
  }
  const Dir d;
  const std::string golden = TG_GOLDEN_DIR;
  // Rank 0 runs `rank0 tapegrad OPTS`, rank 1 `rank1 tapegrad OPTS`: an `env VAR=...` before
  // the program sets a variable on that rank only.
  const std::string opts =
      " train --context 32 --epochs 1 --eval-freq 2 --eval-iter 3 "
      "--sample-tokens 4 --threads 1 --no-progress --batch-size 2 "
      "--max-steps 2 --out " +
      (d / "o");
  const std::string tiny = " --preset tiny";
  struct Row {
    std::string who;
    std::string rank0, rank1, extra;
    int status;
    std::string line;  // "" : filled in below
  };
  const std::string sets = "; every rank must run with the same settings";
  const std::vector<Row> rows = {
      {"TAPEGRAD_THREADS malformed on rank 1", "", "env TAPEGRAD_THREADS=abc", tiny, 1,
       "tapegrad train: rank 1: TAPEGRAD_THREADS='abc' is not a thread count: use an integer "
       "from 1 to 1024"},
      {"TAPEGRAD_DIST_TIMEOUT malformed on rank 1", "", "env TAPEGRAD_DIST_TIMEOUT=-1", tiny, 1,
       "tapegrad train: rank 1: TAPEGRAD_DIST_TIMEOUT='-1' is not a timeout: use whole seconds "
       "from 0 (no limit) to 604800"},
      {"TAPEGRAD_BUCKET_MB malformed on rank 1", "", "env TAPEGRAD_BUCKET_MB=nan", tiny, 1,
       "tapegrad train: rank 1: TAPEGRAD_BUCKET_MB='nan' is not a bucket size: use a number of "
       "MiB from 0 (no overlap) to 4096"},
      {"TAPEGRAD_ISA malformed on rank 1", "", "env TAPEGRAD_ISA=sse9", tiny, 1,
       "tapegrad train: rank 1: TAPEGRAD_ISA: unknown kernel path 'sse9': use one of scalar, "
       "avx2, avx512, avx512_bf16, neon"},
      {"TAPEGRAD_HUGE_PAGES malformed on rank 1", "", "env TAPEGRAD_HUGE_PAGES=yes", tiny, 1,
       "tapegrad train: rank 1: TAPEGRAD_HUGE_PAGES='yes' is not a switch: use 0 (the default) "
       "or 1"},
      {"TAPEGRAD_BLOCK_CACHE_MB malformed on rank 1", "", "env TAPEGRAD_BLOCK_CACHE_MB=1.5", tiny,
       1,
       "tapegrad train: rank 1: TAPEGRAD_BLOCK_CACHE_MB='1.5' is not a size: use a whole number of "
       "MiB up to 16777216, 0 to cache nothing (the default is 2048)"},
      {"TAPEGRAD_BUCKET_MB malformed on both", "env TAPEGRAD_BUCKET_MB=inf",
       "env TAPEGRAD_BUCKET_MB=inf", tiny, 1,
       "tapegrad train: rank 0: TAPEGRAD_BUCKET_MB='inf' is not a bucket size: use a number of "
       "MiB from 0 (no overlap) to 4096"},
      {"TAPEGRAD_BUCKET_MB differs", "", "env TAPEGRAD_BUCKET_MB=0", tiny, 1,
       "tapegrad train: rank 1 has TAPEGRAD_BUCKET_MB=0, rank 0 has " +
           unset_shown("TAPEGRAD_BUCKET_MB", "25") + sets},
      {"TAPEGRAD_ISA differs", "", "env TAPEGRAD_ISA=scalar", tiny, 1,
       "tapegrad train: rank 1 has TAPEGRAD_ISA=scalar, rank 0 has " +
           unset_shown("TAPEGRAD_ISA", kernel_path()) + sets},
      {"TAPEGRAD_GEMM_BLOCKING differs", "", "env TAPEGRAD_GEMM_BLOCKING=64,100,1024", tiny, 1,
       "tapegrad train: rank 1 has TAPEGRAD_GEMM_BLOCKING=64,100,1024, rank 0 has " +
           unset_shown("TAPEGRAD_GEMM_BLOCKING", gemm_blocking()) + sets},
      {"--init-from differs", "", "", "", 2, ""},  // filled below
  };
  for (const Row& row : rows) {
    CAPTURE(row.who);
    fs::remove_all(d / "o");
    std::string line = row.line, extra0 = row.extra, extra1 = row.extra;
    if (row.who == "--init-from differs") {
      extra0 = " --init-from " + golden + "/gpt2_hf", extra1 = " --init-from " + (d / "none");
      line = "tapegrad train: rank 1 has --init-from " + (d / "none") + ", rank 0 has " + golden +
             "/gpt2_hf; every rank must run with the same options";
    }
    const Outcome o = run_bounded(d, kMpirun + "-np 1 " + row.rank0 + " " + kExe + opts + extra0 +
                                         " : -np 1 " + row.rank1 + " " + kExe + opts + extra1);
    CHECK(o.status == row.status);
    CHECK(o.seconds < 20);
    CHECK(lines_from(o.err, "tapegrad") == std::vector<std::string>{line});
    CHECK_FALSE(fs::exists(d / "o/checkpoint.safetensors"));
  }
}

// DIR on rank 0's machine only (rank 1 runs where the relative path is not): rank 0 reads its
// config, weights and tokenizer and sends what the others need, so the job trains as one process
// does. (Before DIR's own tokenizer was used, this fixture was refused at GPT-2's 50257 tokens.)
TEST_CASE("mpirun: --init-from DIR on rank 0's machine only trains" *
          doctest::skip(release_only())) {
  if (!have_mpirun()) {
    MESSAGE("skipped: this build has no MPI or mpirun is missing");
    return;
  }
  const Dir d;
  fs::create_directories(d / "elsewhere");
  const std::string golden = TG_GOLDEN_DIR;
  const std::string init =
      " train --context 32 --epochs 1 --eval-freq 2 --eval-iter 3 "
      "--sample-tokens 4 --threads 1 --no-progress --batch-size 2 "
      "--max-steps 2 --init-from gpt2_hf --out " +
      (d / "o");
  const Outcome o = run_bounded(d, kMpirun + "-np 1 -wdir " + golden + " " + kExe + init +
                                       " : -np 1 -wdir " + (d / "elsewhere") + " " + kExe + init);
  CHECK(o.status == 0);
  CHECK(fs::exists(d / "o/checkpoint.safetensors"));
}

// An error one rank meets alone in the middle of a step (its own memory: rank 1 runs under
// ulimit -v): that rank names itself and ends the job, which no longer waits for it for ever.
TEST_CASE("mpirun: a rank out of memory alone ends the job within seconds, naming itself" *
          doctest::skip(release_only())) {
#if defined(TG_UNDER_ASAN)
  MESSAGE("skipped: ulimit -v leaves AddressSanitizer no room for its shadow memory");
  return;
#endif
  if (!have_mpirun()) {
    MESSAGE("skipped: this build has no MPI or mpirun is missing");
    return;
  }
  const Dir d;
  // A step of 128 windows of 128 tokens per rank needs ~700 MB of address space, a rank at
  // start ~250 MB: rank 1 may have 450 MB, rank 0 all it needs.
  {
    std::ofstream big(d / "big.txt");
    const std::string sample = slurp(std::string(TG_SOURCE_ROOT) + "/data/sample/sample.txt");
    for (int i = 0; i < 8; ++i) big << sample;
  }
  const std::string opts = " train --text " + (d / "big.txt") +
                           " --tokenizer bpe:256 --preset tiny --context 128 --batch-size 256 "
                           "--epochs 1 --eval-freq 100 --eval-iter 1 --sample-tokens 1 --threads 1 "
                           "--no-progress --max-steps 1 --out " +
                           (d / "o");
  const Outcome o =
      run_bounded(d, kMpirun + "-np 1 " + kExe + opts +
                         " : -np 1 sh -c 'ulimit -v 450000; exec \"$0\" \"$@\"' " + kExe + opts);
  CHECK(o.status == 1);
  CHECK(o.seconds < 20);
  const auto lines = lines_from(o.err, "tapegrad");
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].rfind("tapegrad train: rank 1: ", 0) == 0);
  CHECK(lines[0].size() > 16);
  CHECK(lines[0].substr(lines[0].size() - 16) == " (out of memory)");
  CHECK_FALSE(fs::exists(d / "o/checkpoint.safetensors"));
}

namespace {

// A GPT-2 folder small enough to write here: config.json and model.safetensors in Hugging Face's
// names and layout (Conv1D weights in x out, no lm_head) of GPT-2's vocabulary with emb 8, 2
// heads, 1 layer, 32 positions.
void write_gpt2_folder(const std::string& dir) {
  nn::GPTConfig c;
  c.emb_dim = 8, c.n_heads = 2, c.n_layers = 1, c.context_length = 32, c.qkv_bias = true;
  Generator gen;
  gen.manual_seed(5);
  const nn::GPTModel m(c, &gen);
  std::map<std::string, Tensor> p;
  for (const auto& [name, t] : m.state_dict()) p.emplace(name, t.contiguous());
  const auto t = [&](const std::string& n) { return p["trf_blocks.0." + n].T().contiguous(); };
  const auto q = [&](const std::string& n) { return p["trf_blocks.0." + n]; };
  const std::vector<std::pair<std::string, Tensor>> hf = {
      {"wte.weight", p["tok_emb.weight"]},
      {"wpe.weight", p["pos_emb.weight"]},
      {"h.0.ln_1.weight", q("norm1.scale")},
      {"h.0.ln_1.bias", q("norm1.shift")},
      {"h.0.attn.c_attn.weight",
       cat({t("att.W_query.weight"), t("att.W_key.weight"), t("att.W_value.weight")}, 1)},
      {"h.0.attn.c_attn.bias",
       cat({q("att.W_query.bias"), q("att.W_key.bias"), q("att.W_value.bias")}, 0)},
      {"h.0.attn.c_proj.weight", t("att.out_proj.weight")},
      {"h.0.attn.c_proj.bias", q("att.out_proj.bias")},
      {"h.0.ln_2.weight", q("norm2.scale")},
      {"h.0.ln_2.bias", q("norm2.shift")},
      {"h.0.mlp.c_fc.weight", t("ff.layers.0.weight")},
      {"h.0.mlp.c_fc.bias", q("ff.layers.0.bias")},
      {"h.0.mlp.c_proj.weight", t("ff.layers.2.weight")},
      {"h.0.mlp.c_proj.bias", q("ff.layers.2.bias")},
      {"ln_f.weight", p["final_norm.scale"]},
      {"ln_f.bias", p["final_norm.shift"]},
  };
  fs::create_directories(dir);
  save_safetensors(dir + "/model.safetensors", hf, {});
  std::ofstream(dir + "/config.json")
      << "{\"activation_function\": \"gelu_new\", \"n_embd\": 8, \"n_head\": 2, \"n_layer\": 1, "
         "\"n_positions\": 32, \"vocab_size\": 50257}";
}

}  // namespace

// Rank 0 reads --init-from DIR and sends it: rank 1 runs in a folder where the relative DIR is
// not (another machine), and the run is still one process's with --micro-batches 2.
TEST_CASE("mpirun: --init-from DIR is needed on rank 0's machine only" *
          doctest::skip(release_only())) {
  if (!have_mpirun()) {
    MESSAGE("skipped: this build has no MPI or mpirun is missing");
    return;
  }
  if (!fs::exists(std::string(TG_SOURCE_ROOT) + "/third_party/gpt2/encoder.json")) {
    MESSAGE("skipped: GPT-2's tokenizer files are not fetched (make gpt2)");
    return;
  }
  const Dir d;
  write_gpt2_folder(d / "gpt2");
  fs::create_directories(d / "elsewhere");
  const std::string opts =
      " train --init-from gpt2 --context 16 --epochs 1 --eval-freq 2 --eval-iter 1 "
      "--sample-tokens 2 --threads 1 --no-progress --batch-size 2 --max-steps 2 --out ";
  REQUIRE(run("cd " + (d / "") + " && " + kExe + opts + (d / "one") + " --micro-batches 2 > " +
              (d / "one.log") + " 2> /dev/null") == 0);
  // A whole run (GPT-2's tokenizer on rank 0): more time than a refusal, under ASan too.
  const Outcome o =
      run_bounded(d,
                  kMpirun + "-np 1 -wdir " + (d / "") + " " + kExe + opts + (d / "many") +
                      " : -np 1 -wdir " + (d / "elsewhere") + " " + kExe + opts + (d / "many"),
                  180);
  CAPTURE(o.err);
  CHECK(o.status == 0);
  REQUIRE(fs::exists(d / "many/checkpoint.safetensors"));
  check_same_checkpoint(d / "one/checkpoint.safetensors", d / "many/checkpoint.safetensors");
}

TEST_CASE("TAPEGRAD_BUCKET_MB and TAPEGRAD_DIST_TIMEOUT are parsed whole and range-checked") {
  const Dir d;
  struct Row {
    const char* var;
    const char* value;
    const char* why;
  };
  const char* bucket = "' is not a bucket size: use a number of MiB from 0 (no overlap) to 4096";
  const char* timeout = "' is not a timeout: use whole seconds from 0 (no limit) to 604800";
  const std::vector<Row> rows = {
      {"TAPEGRAD_BUCKET_MB", "abc", bucket},     {"TAPEGRAD_BUCKET_MB", "-1", bucket},
      {"TAPEGRAD_BUCKET_MB", "nan", bucket},     {"TAPEGRAD_BUCKET_MB", "1e30", bucket},
      {"TAPEGRAD_BUCKET_MB", "inf", bucket},     {"TAPEGRAD_BUCKET_MB", "25x", bucket},
      {"TAPEGRAD_BUCKET_MB", " 25", bucket},     {"TAPEGRAD_BUCKET_MB", "4097", bucket},
      {"TAPEGRAD_DIST_TIMEOUT", "abc", timeout}, {"TAPEGRAD_DIST_TIMEOUT", "-1", timeout},
      {"TAPEGRAD_DIST_TIMEOUT", "1.5", timeout}, {"TAPEGRAD_DIST_TIMEOUT", "+5", timeout},
      {"TAPEGRAD_DIST_TIMEOUT", "1e9", timeout}, {"TAPEGRAD_DIST_TIMEOUT", "604801", timeout},
  };
  for (const Row& row : rows) {
    const std::string setting = std::string(row.var) + "=" + row.value;
    CAPTURE(setting);
    const std::string out = d / (std::to_string(&row - rows.data()) + ".out");
    CHECK(run("env '" + setting + "' " + kExe + kTiny + " --batch-size 2 --max-steps 1 --out " +
              out + " > /dev/null 2> " + (d / "err")) == 1);
    CHECK(slurp(d / "err") ==
          "tapegrad train: " + std::string(row.var) + "='" + row.value + row.why + "\n");
    CHECK_FALSE(fs::exists(out + "/checkpoint.safetensors"));
  }
  // In range: the bounds themselves.
  CHECK(parse_bucket_mb("0") == 0);
  CHECK(parse_bucket_mb("0.05") == 0.05);
  CHECK(parse_bucket_mb("4096") == 4096);
  CHECK(dist::parse_timeout("0") == 0);
  CHECK(dist::parse_timeout("604800") == 604800);
}

TEST_CASE("DDP: ranks with other parameters, a missing gradient or no dist::init() refuse") {
  if (!have_mpirun()) {
    MESSAGE("skipped: this build has no MPI or mpirun is missing");
    return;
  }
  REQUIRE(fs::exists(TG_DDP_PROBE));  // built beside test_dist (make test-asan names it)
  const Dir d;
  struct Row {
    std::string mode;
    int status;
    std::string line;
  };
  const std::string same = "; every rank must build the same model";
  const std::vector<Row> rows = {
      {"same", 0, ""},
      {"shapes", 1,
       "ddp_probe: DistributedDataParallel: rank 1's parameter 0 is 'weight' torch.float32 "
       "[2, 3], rank 0's is 'weight' torch.float32 [3, 2]" +
           same},
      {"bias", 1,
       "ddp_probe: DistributedDataParallel: rank 1 has parameter 1 'bias' torch.float32 [3], "
       "rank 0 has none" +
           same},
      {"no-grad", 1,
       "ddp_probe: DistributedDataParallel: rank 1: parameter 'weight' has no gradient (call "
       "reduce_gradients after backward)"},
      {"no-init", 1,
       "ddp_probe: DistributedDataParallel: this process is one of 2 started by an MPI "
       "launcher, but dist::init() has not run (each would train alone as rank 0 of 1): call "
       "dist::init() first"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.mode);
    const Outcome o =
        run_bounded(d, kMpirun + "-np 2 " + std::string(TG_DDP_PROBE) + " " + row.mode);
    CHECK(o.status == row.status);
    CHECK(o.seconds < 20);
    const auto lines = lines_from(o.err, "ddp_probe");
    CHECK(lines ==
          (row.line.empty() ? std::vector<std::string>{} : std::vector<std::string>{row.line}));
  }
}

TEST_CASE("DistributedSampler gives PyTorch's indices (tests/golden/gen_dist_sampler.py)") {
  const std::vector<std::vector<int64_t>> shuffled = {{1, 6, 0, 7}, {4, 3, 2, 1}, {9, 5, 8, 4}};
  const std::vector<std::vector<int64_t>> dropped = {{1, 6, 0}, {4, 3, 2}, {9, 5, 8}};
  for (int r = 0; r < 3; ++r) {
    DistributedSampler s(10, true, 3, false, 3, r), d(10, true, 3, true, 3, r);
    s.set_epoch(2);
    d.set_epoch(2);
    CHECK(s.indices() == shuffled[size_t(r)]);
    CHECK(s.num_samples() == 4);
    CHECK(d.indices() == dropped[size_t(r)]);
    CHECK(d.num_samples() == 3);
  }
  // In order, padded from the start: rank 1 of 3 over 10.
  CHECK(DistributedSampler(10, false, 0, false, 3, 1).indices() ==
        std::vector<int64_t>{1, 4, 7, 0});
  CHECK_THROWS_WITH(DistributedSampler(10, false, 0, false, 3, 3),
                    "DistributedSampler: invalid rank 3, rank should be in the interval [0, 2]");
}
