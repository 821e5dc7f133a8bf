// GPTDatasetV1 and DataLoader tests (§2.6), and chapter 5's training data (§5.1.3). Token ids are
// iota (0, 1, 2, ...), so every window is a range check (llm.c dev/test/test_dataloader.c); the
// shuffle order is docs/torch_rng.md §11 ex. 5.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "data/gpt_dataset.h"
#include "data/training_data.h"

using tg::Generator;
using tg::data::Batch;
using tg::data::DataLoader;
using tg::data::GPTDatasetV1;

namespace {
std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}
// True if span s is start, start+1, ..., start+len-1.
bool is_range(std::span<const int64_t> s, int64_t start, int64_t len) {
  if (static_cast<int64_t>(s.size()) != len) return false;
  for (int64_t k = 0; k < len; ++k)
    if (s[k] != start + k) return false;
  return true;
}
std::vector<std::vector<int64_t>> epoch(const DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  auto it = loader.iter();
  Batch b;
  while (it.next(b)) out.push_back(b.indices);
  return out;
}
}  // namespace

TEST_CASE("GPTDatasetV1 windows: stride 1") {
  const GPTDatasetV1 ds(iota(20), 4, 1);
  CHECK(ds.size() == 16);  // i = 0 .. 15 (< 20 - 4)
  for (int64_t i = 0; i < ds.size(); ++i) {
    CHECK(is_range(ds.input_ids(i), i, 4));
    CHECK(is_range(ds.target_ids(i), i + 1, 4));
  }
  CHECK_THROWS_AS(ds.input_ids(16), std::out_of_range);
}

TEST_CASE("GPTDatasetV1 windows: stride = max_length, and uneven strides") {
  const GPTDatasetV1 ds(iota(20), 4, 4);
  CHECK(ds.size() == 4);  // i = 0, 4, 8, 12; 16 is not < 16
  for (int64_t w = 0; w < ds.size(); ++w) {
    CHECK(is_range(ds.input_ids(w), 4 * w, 4));
    CHECK(is_range(ds.target_ids(w), 4 * w + 1, 4));
  }
  // The last target may end on the last token: 21 tokens give a 5th window at i = 16.
  CHECK(GPTDatasetV1(iota(21), 4, 4).size() == 5);
  CHECK(is_range(GPTDatasetV1(iota(21), 4, 4).target_ids(4), 17, 4));
  // range(0, 23 - 4, 3) = 0, 3, ..., 18: seven windows.
  const GPTDatasetV1 odd(iota(23), 4, 3);
  CHECK(odd.size() == 7);
  CHECK(is_range(odd.input_ids(6), 18, 4));
  CHECK(GPTDatasetV1(iota(5), 4, 100).size() == 1);
}

TEST_CASE("too little text for one window names both counts") {
  CHECK_THROWS_WITH_AS(GPTDatasetV1(iota(4), 4, 1),
                       doctest::Contains("has 4 tokens, but one window of max_length 4 needs at "
                                         "least 5"),
                       std::invalid_argument);
  CHECK_THROWS_AS(GPTDatasetV1(iota(0), 1, 1), std::invalid_argument);
  CHECK_THROWS_AS(GPTDatasetV1(iota(10), 0, 1), std::invalid_argument);
  CHECK_THROWS_AS(GPTDatasetV1(iota(10), 2, 0), std::invalid_argument);
}

TEST_CASE("DataLoader without shuffle: batches in order, drop_last") {
  auto ds = std::make_shared<GPTDatasetV1>(iota(12), 2, 1);  // 10 windows
  DataLoader keep(ds, 4, false, false);
  CHECK(keep.size() == 3);
  CHECK(epoch(keep) == std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}});
  DataLoader drop(ds, 4, false, true);
  CHECK(drop.size() == 2);
  CHECK(epoch(drop).size() == 2);
  // Batch contents: (batch_size, max_length) row-major, targets shifted by one.
  auto it = keep.iter();
  Batch b;
  REQUIRE(it.next(b));
  CHECK(b.batch_size == 4);
  CHECK(b.max_length == 2);
  CHECK(b.inputs == std::vector<int64_t>{0, 1, 1, 2, 2, 3, 3, 4});
  CHECK(b.targets == std::vector<int64_t>{1, 2, 2, 3, 3, 4, 4, 5});
}

TEST_CASE(
    "DataLoader(shuffle=True) matches PyTorch's order (docs/torch_rng.md section 11, ex. 5)") {
  // torch.manual_seed(123); DataLoader(list(range(10)), batch_size=5, shuffle=True), twice.
  Generator gen(123);
  auto ds = std::make_shared<GPTDatasetV1>(iota(11), 1, 1);  // window i is [i]: 10 items
  DataLoader loader(ds, 5, true, false, gen);
  CHECK(epoch(loader) == std::vector<std::vector<int64_t>>{{8, 2, 6, 7, 0}, {3, 9, 1, 5, 4}});
  CHECK(epoch(loader) == std::vector<std::vector<int64_t>>{{5, 9, 2, 7, 8}, {6, 4, 0, 1, 3}});
  // Each epoch took four 32-bit words from the generator: the next is word 8 after seeding.
  Generator ref(123);
  for (int k = 0; k < 8; ++k) ref.random();
  CHECK(gen.random() == ref.random());
}

TEST_CASE("DataLoader batch rows are the windows it names") {
  Generator gen(7);
  auto ds = std::make_shared<GPTDatasetV1>(iota(100), 8, 3);
  DataLoader loader(ds, 4, true, true, gen);
  auto it = loader.iter();
  Batch b;
  int batches = 0;
  std::vector<int> seen(ds->size(), 0);
  while (it.next(b)) {
    ++batches;
    for (int64_t r = 0; r < b.batch_size; ++r) {
      const int64_t start = b.indices[r] * 3;
      ++seen[b.indices[r]];
      CHECK(is_range({b.inputs.data() + r * 8, 8}, start, 8));
      CHECK(is_range({b.targets.data() + r * 8, 8}, start + 1, 8));
    }
  }
  CHECK(batches == loader.size());
  CHECK(ds->size() == 31);  // ceil((100 - 8) / 3)
  int total = 0;
  for (const int s : seen) {
    CHECK(s <= 1);
    total += s;
  }
  CHECK(total == 28);  // 7 full batches of 4; 3 windows dropped
}

TEST_CASE("DataLoader epoch_order + batch replay iter() + next(), draws included") {
  // The trainer's way (order kept for checkpoints) must equal the Iterator's, batch by batch,
  // and leave the generator where the Iterator leaves it.
  for (const bool shuffle : {false, true}) {
    for (const bool drop_last : {false, true}) {
      CAPTURE(shuffle);
      CAPTURE(drop_last);
      Generator g_iter(42), g_order(42);
      auto ds = std::make_shared<GPTDatasetV1>(iota(60), 5, 3);  // 19 windows
      const DataLoader by_iter(ds, 4, shuffle, drop_last, g_iter);
      const DataLoader by_order(ds, 4, shuffle, drop_last, g_order);
      for (int e = 0; e < 2; ++e) {
        auto it = by_iter.iter();
        const std::vector<int64_t> order = by_order.epoch_order();
        Batch b;
        int64_t k = 0;
        while (it.next(b)) {
          const Batch c = by_order.batch(order, k++);
          CHECK(c.indices == b.indices);
          CHECK(c.inputs == b.inputs);
          CHECK(c.targets == b.targets);
          CHECK(c.batch_size == b.batch_size);
        }
        CHECK(k == by_order.size());
        CHECK(k == (drop_last ? 4 : 5));
        CHECK(g_iter.get_state() == g_order.get_state());
      }
      const std::vector<int64_t> order = by_order.epoch_order();
      CHECK_THROWS_AS(by_order.batch(order, by_order.size()), std::out_of_range);
      CHECK_THROWS_AS(by_order.batch(order, -1), std::out_of_range);
      CHECK_THROWS_AS(by_order.batch({0, 1}, 0), std::invalid_argument);
    }
  }
}

TEST_CASE("create_dataloader_v1 on the-verdict.txt (the book's 2.6 example)") {
  const std::string path = std::string(TG_TEST_SHARED_DIR) + "/data/the-verdict.txt";
  if (!std::filesystem::exists(path)) {
    MESSAGE("skipped: " << path << " not found");
    return;
  }
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const auto tok =
      tg::data::Tokenizer::gpt2(std::string(TG_TEST_SOURCE_ROOT) + "/third_party/gpt2");
  // The book: batch_size=1, max_length=4, stride=1, shuffle=False -> [[40, 367, 2885, 1464]],
  // targets [[367, 2885, 1464, 1807]]; the second batch is [[367, 2885, 1464, 1807]].
  DataLoader loader = tg::data::create_dataloader_v1(ss.str(), 1, 4, 1, false, false, &tok);
  auto it = loader.iter();
  Batch b;
  REQUIRE(it.next(b));
  CHECK(b.inputs == std::vector<int64_t>{40, 367, 2885, 1464});
  CHECK(b.targets == std::vector<int64_t>{367, 2885, 1464, 1807});
  REQUIRE(it.next(b));
  CHECK(b.inputs == std::vector<int64_t>{367, 2885, 1464, 1807});
  CHECK(loader.size() == 5145 - 4);
  // The book's second example: batch_size=8, max_length=4, stride=4, shuffle=False.
  DataLoader eight = tg::data::create_dataloader_v1(ss.str(), 8, 4, 4, false, true, &tok);
  auto it8 = eight.iter();
  REQUIRE(it8.next(b));
  CHECK(b.batch_size == 8);
  CHECK(std::vector<int64_t>(b.inputs.begin(), b.inputs.begin() + 12) ==
        std::vector<int64_t>{40, 367, 2885, 1464, 1807, 3619, 402, 271, 10899, 2138, 257, 7026});
  CHECK(std::vector<int64_t>(b.targets.begin(), b.targets.begin() + 4) ==
        std::vector<int64_t>{367, 2885, 1464, 1807});
}

// §5.1.3's preparation (data/training_data.h): the split counts code points as Python's len does,
// and each refusal is the one line `tapegrad train` prints.
TEST_CASE("training data: the 90/10 split by code points") {
  using tg::data::split_train_val;
  const auto ascii = split_train_val(std::string(100, 'x'));
  CHECK(ascii.train == std::string(90, 'x'));
  CHECK(ascii.val == std::string(10, 'x'));
  // 10 one-byte and 10 three-byte code points: int(0.9 * 20) = 18 of them train, cut between
  // two euro signs (a 90% cut of the 40 bytes would fall inside one).
  std::string mixed(10, 'a'), euros;
  for (int i = 0; i < 10; ++i) euros += "\xE2\x82\xAC";  // €
  const auto split = split_train_val(mixed + euros);
  CHECK(split.train == mixed + euros.substr(0, 24));
  CHECK(split.val == euros.substr(24));
  const auto empty = split_train_val("");
  CHECK((empty.train.empty() && empty.val.empty()));
}

TEST_CASE("training data: the loaders, and text too short for a window or a batch") {
  using tg::data::create_train_val_loaders;
  Generator gen(123);
  // 21 training ids at context 4: windows start at 0, 4, 8, 12, 16 (i < 21 - 4); batches of 2
  // with drop_last: 2. 10 validation ids: windows at 0 and 4; batches of 2: 1.
  const auto loaders = create_train_val_loaders({iota(21), iota(10)}, 4, 2, gen, "t.txt");
  CHECK(loaders.train.dataset().size() == 5);
  CHECK(loaders.train.size() == 2);
  CHECK(loaders.val.dataset().size() == 2);
  CHECK(loaders.val.size() == 1);
  CHECK_THROWS_WITH_AS(create_train_val_loaders({iota(4), iota(10)}, 4, 2, gen, "t.txt"),
                       "text too short: the training split of 't.txt' has 4 tokens, one window of "
                       "context 4 needs 5 (use a longer text or a smaller --context)",
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(create_train_val_loaders({iota(21), iota(3)}, 4, 2, gen, "t.txt"),
                       "text too short: the validation split of 't.txt' has 3 tokens, one window "
                       "of context 4 needs 5 (use a longer text or a smaller --context)",
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(create_train_val_loaders({iota(21), iota(10)}, 4, 6, gen, "t.txt"),
                       "text too short: 5 training windows of 4 tokens, fewer than one batch of 6",
                       std::runtime_error);
}

TEST_CASE("training data: the run's tokenizer from its name") {
  using tg::data::make_training_tokenizer;
  std::ostringstream err;
  // n_vocab counts <|endoftext|> too. "ab" has one pair to merge, not the two bpe:258 asks for.
  CHECK(make_training_tokenizer("bpe:256", "abc", "t.txt", err)->n_vocab() == 257);
  CHECK(err.str().empty());
  CHECK(make_training_tokenizer("bpe:258", "ab", "t.txt", err)->n_vocab() == 258);
  CHECK(err.str() ==
        "warning: the training text of t.txt ran out of pairs; tokenizer bpe:258 has 257 tokens, "
        "not 258\n");
  CHECK_THROWS_WITH_AS(make_training_tokenizer("bpe:100", "abc", "t.txt", err),
                       "bad tokenizer 'bpe:100': bpe:N needs 256 <= N <= 100000",
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(make_training_tokenizer("sentencepiece", "abc", "t.txt", err),
                       "unknown tokenizer 'sentencepiece' (known: gpt2, bpe:N)",
                       std::runtime_error);
}
