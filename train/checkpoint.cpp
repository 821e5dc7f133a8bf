// Training checkpoints (see checkpoint.h).
#include "train/checkpoint.h"

#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <set>

#include "core/text.h"
#include "core/threadpool.h"

namespace tg::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "tapegrad-checkpoint-v1";

std::string hex(const std::vector<uint8_t>& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  s.reserve(b.size() * 2);
  for (uint8_t x : b) {
    s += d[x >> 4];
    s += d[x & 15];
  }
  return s;
}

std::vector<uint8_t> unhex(const std::string& s) {
  auto v = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (s.size() % 2) throw std::runtime_error("odd hex length");
  std::vector<uint8_t> out(s.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = v(s[2 * i]), lo = v(s[2 * i + 1]);
    if (hi < 0 || lo < 0) throw std::runtime_error("bad hex digit");
    out[i] = uint8_t(hi << 4 | lo);
  }
  return out;
}

// The tokenizer's description for the checkpoint: its merges and specials, gpt2's too, so the
// checkpoint decodes with the run's own vocabulary (--init-from DIR's vocab.json + merges.txt),
// not whatever GPT-2 files the build that reads it has. gpt2's ids 0..255 are the bytes in
// bytes_to_unicode's order: tokenizer.byte_order keeps it.
void tokenizer_to_checkpoint(const std::string& spec, const data::Tokenizer& tok,
                             std::vector<std::pair<std::string, Tensor>>& tensors, Metadata& md) {
  if (spec == "gpt2") {
    std::vector<int64_t> order(256);
    for (int id = 0; id < 256; ++id) order[id] = uint8_t(tok.token_bytes(id)[0]);
    tensors.emplace_back("tokenizer.byte_order", from_vector(order, {256}));
  }
  std::vector<int64_t> merges;
  for (int id = 256; id < tok.n_mergeable(); ++id) {
    const auto [a, b] = tok.merge_of(id);
    merges.push_back(a);
    merges.push_back(b);
  }
  tensors.emplace_back("tokenizer.merges", from_vector(merges, {int64_t(merges.size() / 2), 2}));
  std::string sp = "[";
  for (size_t i = 0; i < tok.specials().size(); ++i) {
    if (i) sp += ',';
    sp += '[';
    sp += json::quote(tok.specials()[i].first);
    sp += ',';
    sp += std::to_string(tok.specials()[i].second);
    sp += ']';
  }
  sp += ']';
  md["tokenizer_specials"] = sp;
}

// NaN or infinite weights would sample garbage (NUL bytes) and exit 0: refused by name.
void check_finite(const Tensor& t, const std::string& name, const std::string& path) {
  if (t.dtype() != DType::Float32) return;
  for (const float x : t.to_vector<float>())
    if (!std::isfinite(x))
      throw TrainError(path + ": '" + show_name(name) +
                       "' holds NaN or infinite values (a corrupt or diverged checkpoint)");
}

// Every stored tensor must be one a checkpoint has: the model's, AdamW's moments of its
// parameters, the interrupted epoch's order, the tokenizer's merges. Anything else means a file
// from another model or a spliced one.
void check_known_tensors(nn::GPTModel& model, const SafeTensors& st, const std::string& path) {
  std::set<std::string> known = {"trainer.epoch_order", "tokenizer.merges", "tokenizer.byte_order"};
  for (const auto& [name, t] : model.state_dict()) known.insert(name);
  for (const auto& [name, p] : model.named_parameters()) {
    known.insert("optimizer.exp_avg." + name);
    known.insert("optimizer.exp_avg_sq." + name);
  }
  for (const auto& [name, t] : st.tensors)
    if (!known.count(name))
      throw TrainError(path + ": unexpected tensor '" + show_name(name) +
                       "' (not part of this model)");
}

// Copies the checkpoint's state_dict entries into the model; every name must be present with
// the model's shape (without --pad-vocab's rows, which are not stored) and dtype, finite, and no
// other tensor may be stored.
void load_weights(nn::GPTModel& model, const SafeTensors& st, const std::string& path) {
  check_known_tensors(model, st, path);
  nn::NamedTensors sd;
  for (const auto& [name, held] : model.state_dict()) {
    const Tensor t = model.unpad(name, held);
    const Tensor* src = st.find(name);
    if (!src)
      throw TrainError(path + ": checkpoint lacks '" + show_name(name) + "' (another model?)");
    if (src->shape() != t.shape() || src->dtype() != t.dtype())
      throw TrainError(path + ": '" + show_name(name) + "' is " + shape_str(src->shape()) +
                       " in the checkpoint but " + shape_str(t.shape()) +
                       " in this model (a checkpoint from another config)");
    check_finite(*src, name, path);
    sd.emplace_back(name, model.pad(name, *src));
  }
  model.load_state_dict(sd);
}

}  // namespace

std::string text_hash(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

namespace {

// The config's sizes must be the stored tensors' before a model is built from it, so a corrupt
// config cannot ask for more memory than the file holds (n_layers 2^32, context 10^12) or drop
// stored layers silently.
void check_config_against_tensors(const nn::GPTConfig& cfg, const SafeTensors& st,
                                  const std::string& path) {
  auto expect = [&](const char* name, const Shape& want) {
    const Tensor* t = st.find(name);
    if (!t) throw TrainError(path + ": checkpoint lacks '" + show_name(name) + "'");
    if (t->shape() != want)
      throw TrainError(path + ": '" + show_name(name) + "' is " + shape_str(t->shape()) +
                       " but the checkpoint's config needs " + shape_str(want) +
                       " (a corrupt checkpoint, or weights from another config)");
  };
  expect("tok_emb.weight", {cfg.vocab_size, cfg.emb_dim});
  expect("pos_emb.weight", {cfg.context_length, cfg.emb_dim});
  expect("out_head.weight", {cfg.vocab_size, cfg.emb_dim});
  // Blocks stored: the distinct N of "trf_blocks.N." (the names are checked one by one later).
  std::vector<bool> seen;
  int64_t blocks = 0;
  for (const auto& [name, t] : st.tensors) {
    if (name.rfind("trf_blocks.", 0) != 0) continue;
    const size_t dot = name.find('.', 11);
    const std::string idx = name.substr(11, dot == std::string::npos ? dot : dot - 11);
    if (idx.empty() || idx.size() > 6 || idx.find_first_not_of("0123456789") != std::string::npos)
      throw TrainError(path + ": unexpected tensor '" + show_name(name) + "'");
    const size_t i = std::stoul(idx);
    if (i >= seen.size()) seen.resize(i + 1, false);
    if (!seen[i]) ++blocks;
    seen[i] = true;
  }
  if (blocks != int64_t(seen.size()) || blocks != cfg.n_layers)
    throw TrainError(path + ": the checkpoint's config says n_layers " +
                     std::to_string(cfg.n_layers) + " but it stores " + std::to_string(blocks) +
                     " blocks" + (blocks != int64_t(seen.size()) ? " with gaps" : ""));
}

}  // namespace

nn::GPTConfig config_from_checkpoint(const SafeTensors& st, const std::string& path) {
  const auto f = st.metadata.find("format");
  if (f == st.metadata.end() || f->second != kFormat)
    throw TrainError(path + ": not a tapegrad checkpoint (metadata format is not " +
                     std::string(kFormat) + ")");
  const auto c = st.metadata.find("config");
  if (c == st.metadata.end()) throw TrainError(path + ": checkpoint has no config");
  nn::GPTConfig cfg;
  try {
    cfg = nn::GPTConfig::parse(c->second);
    cfg.validate();
  } catch (const std::exception& e) {
    throw TrainError(path + ": " + e.what());
  }
  check_config_against_tensors(cfg, st, path);
  return cfg;
}

namespace {

// "preset" or "tokenizer": stored once, in the options.
std::string recipe_entry(const SafeTensors& st, const std::string& path, const char* key) {
  const json::Value options = options_from_checkpoint(st, path);
  const json::Value* v = options.find(key);
  const auto old = st.metadata.find(key);  // checkpoints before issue 23 held a second copy
  if (!v || v->kind != json::Value::Kind::String) {
    if (old != st.metadata.end()) return old->second;
    throw TrainError(path + ": checkpoint options lack '" + key + "'");
  }
  if (old != st.metadata.end() && old->second != v->str)
    throw TrainError(path + ": checkpoint's metadata '" + key + "' is '" + show_bytes(old->second) +
                     "' but its options say '" + show_bytes(v->str) +
                     "' (an edited checkpoint; one of them is wrong)");
  return v->str;
}

// gpt2's tokenizer.byte_order: the byte of each of ids 0..255.
std::string byte_order(const SafeTensors& st, const std::string& path) {
  const Tensor* o = st.find("tokenizer.byte_order");
  if (!o || o->dim() != 1 || o->size(0) != 256 || o->dtype() != DType::Int64)
    throw TrainError(path + ": checkpoint's tokenizer 'gpt2' lacks its tokenizer.byte_order");
  std::string order;
  for (const int64_t b : o->to_vector<int64_t>()) {
    if (b < 0 || b > 255)
      throw TrainError(path + ": checkpoint's tokenizer.byte_order holds " + std::to_string(b) +
                       ", not a byte");
    order += char(b);
  }
  return order;
}

}  // namespace

std::unique_ptr<data::Tokenizer> tokenizer_from_checkpoint(const SafeTensors& st,
                                                           const std::string& path) {
  const std::string spec = recipe_entry(st, path, "tokenizer");
  if (spec == "gpt2" && !st.find("tokenizer.merges")) {  // written before gpt2's was kept
    try {
      return std::make_unique<data::Tokenizer>(data::Tokenizer::gpt2());
    } catch (const std::exception& e) {
      throw TrainError(e.what());
    }
  }
  const Tensor* m = st.find("tokenizer.merges");
  const auto sp = st.metadata.find("tokenizer_specials");
  if (!m || m->dim() != 2 || m->size(1) != 2 || m->dtype() != DType::Int64 ||
      sp == st.metadata.end())
    throw TrainError(path + ": checkpoint's tokenizer '" + spec + "' lacks its merges");
  std::vector<std::pair<int, int>> merges;
  const std::vector<int64_t> v = m->to_vector<int64_t>();
  for (size_t i = 0; i + 1 < v.size(); i += 2) {
    // Checked before narrowing to int: an id of 2^32 + 5 must not become 5.
    const int64_t limit = 256 + int64_t(i / 2);
    if (v[i] < 0 || v[i] >= limit || v[i + 1] < 0 || v[i + 1] >= limit)
      throw TrainError(path + ": checkpoint's tokenizer.merges row " + std::to_string(i / 2) +
                       " uses an id outside 0.." + std::to_string(limit - 1));
    merges.emplace_back(int(v[i]), int(v[i + 1]));
  }
  const std::string order = spec == "gpt2" ? byte_order(st, path) : "";
  std::vector<std::pair<std::string, int>> specials;
  try {
    const json::Value list = json::parse(sp->second);
    if (list.kind != json::Value::Kind::Array) throw std::runtime_error("specials not a list");
    for (const json::Value& e : list.items) {
      if (e.kind != json::Value::Kind::Array || e.items.size() != 2 ||
          e.items[0].kind != json::Value::Kind::String)
        throw std::runtime_error("a special is not [\"name\", id]");
      const int64_t id = e.items[1].as_int();
      if (id < 0 || id > INT32_MAX) throw std::runtime_error("special id out of range");
      specials.emplace_back(e.items[0].str, int(id));
    }
    return std::make_unique<data::Tokenizer>(data::Tokenizer::from_merges(merges, specials, order));
  } catch (const std::exception& e) {
    throw TrainError(path + ": checkpoint's tokenizer does not load (" + e.what() + ")");
  }
}

SafeTensors read_checkpoint(const std::string& path) {
  if (!fs::exists(path)) throw TrainError(path + ": no such checkpoint");
  SafeTensors st;
  try {
    st = load_safetensors(path);
  } catch (const std::exception& e) {
    throw TrainError(e.what());
  }
  check_checkpoint(st, path);
  return st;
}

void check_checkpoint(const SafeTensors& st, const std::string& path) {
  config_from_checkpoint(st, path);  // checks the format
  for (const char* key : {"preset", "tokenizer"}) recipe_entry(st, path, key);
}

json::Value options_from_checkpoint(const SafeTensors& st, const std::string& path) {
  const auto it = st.metadata.find("options");
  if (it == st.metadata.end()) throw TrainError(path + ": checkpoint lacks its options");
  try {
    return json::parse(it->second);
  } catch (const std::exception& e) {
    throw TrainError(path + ": checkpoint options do not parse (" + e.what() + ")");
  }
}

void save_checkpoint(const std::string& path, nn::GPTModel& model, const AdamW& optimizer,
                     const Generator& gen, const RunRecipe& recipe, const RunPosition& pos) {
  // A bf16-pure run's weights and moments as float32 (exactly their bf16 values): one checkpoint
  // format, which resume, generate and the book's GPTModel read as they are. --pad-vocab's rows
  // are left out: a padded run stores the unpadded run's tensors, byte for byte.
  const auto f32 = [&](const std::string& name, const Tensor& t) {
    return model.unpad(name, t).to(DType::Float32);
  };
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : model.state_dict()) tensors.emplace_back(name, f32(name, t));
  const auto params = model.named_parameters();
  for (size_t k = 0; k < params.size(); ++k)
    tensors.emplace_back("optimizer.exp_avg." + params[k].first,
                         f32(params[k].first, optimizer.exp_avg[k]));
  for (size_t k = 0; k < params.size(); ++k)
    tensors.emplace_back("optimizer.exp_avg_sq." + params[k].first,
                         f32(params[k].first, optimizer.exp_avg_sq[k]));
  if (pos.batch > 0)
    tensors.emplace_back("trainer.epoch_order",
                         from_vector(pos.epoch_order, {int64_t(pos.epoch_order.size())}));
  Metadata md;
  md["format"] = kFormat;
  md["config"] = recipe.cfg.str();
  md["options"] = recipe.options_json;  // preset, tokenizer and the other options, once
  md["optimizer"] = "AdamW";
  md["optimizer_step"] = std::to_string(optimizer.step_count);
  md["global_step"] = std::to_string(pos.global_step);
  md["epoch"] = std::to_string(pos.epoch);
  md["batch"] = std::to_string(pos.batch);
  md["tokens_seen"] = std::to_string(pos.tokens_seen);
  md["seconds"] = json::number(pos.seconds);
  md["threads"] = std::to_string(num_threads());
  md["rng_state"] = hex(gen.get_state());
  md["text_hash"] = recipe.text_hash;
  std::string hist = "[";
  for (size_t i = 0; i < pos.history.size(); ++i) {
    const EvalPoint& p = pos.history[i];
    if (i) hist += ',';
    hist += to_json(p);
  }
  md["history"] = hist + "]";
  tokenizer_to_checkpoint(recipe.tokenizer_spec, recipe.tokenizer, tensors, md);
  try {
    save_safetensors(path, tensors, md);
  } catch (const std::exception& e) {
    throw TrainError(e.what());
  }
}

namespace {

// A training-state entry of the metadata; errors name the key.
const std::string& state_str(const SafeTensors& st, const char* key, const std::string& path) {
  const auto it = st.metadata.find(key);
  if (it == st.metadata.end())
    throw TrainError(path + ": checkpoint training state lacks '" + key + "'");
  return it->second;
}

int64_t state_int(const SafeTensors& st, const char* key, const std::string& path) {
  const std::string& v = state_str(st, key, path);
  int64_t x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size())
    throw TrainError(path + ": checkpoint's '" + key + "' is not an integer: '" + show_bytes(v) +
                     "'");
  return x;
}

double state_real(const SafeTensors& st, const char* key, const std::string& path) {
  const std::string& v = state_str(st, key, path);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(x) || x < 0)
    throw TrainError(path + ": checkpoint's '" + key + "' is not a number >= 0: '" + show_bytes(v) +
                     "'");
  return x;
}

// The "history" entry: a JSON list of evaluations.
std::vector<EvalPoint> read_history(const std::string& text, const std::string& path) {
  json::Value list;
  try {
    list = json::parse(text);
  } catch (const json::Error& e) {
    throw TrainError(path + ": checkpoint's 'history' does not parse (" + e.what() + ")");
  }
  if (list.kind != json::Value::Kind::Array)
    throw TrainError(path + ": checkpoint's 'history' is not a list");
  std::vector<EvalPoint> history;
  for (const json::Value& e : list.items) {
    auto integer = [&](const char* k) {
      const json::Value* v = e.find(k);
      if (!v || v->kind != json::Value::Kind::Number)
        throw TrainError(path + ": checkpoint history entry lacks '" + k + "'");
      try {
        return v->as_int();
      } catch (const json::Error& err) {
        throw TrainError(path + ": checkpoint history entry's '" + k + "': " + err.what());
      }
    };
    auto real = [&](const char* k) {
      const json::Value* v = e.find(k);
      return v && v->kind == json::Value::Kind::Number ? v->num
                                                       : std::numeric_limits<double>::quiet_NaN();
    };
    history.push_back({.epoch = integer("epoch"),
                       .step = integer("step"),
                       .tokens_seen = integer("tokens_seen"),
                       .train_loss = real("train_loss"),
                       .val_loss = real("val_loss"),
                       .lr = real("lr"),
                       .seconds = real("seconds")});
  }
  return history;
}

// The interrupted epoch's batch order: a permutation of the training windows, else a resume
// would read windows twice, skip others or index past the dataset.
std::vector<int64_t> read_epoch_order(const SafeTensors& st, const std::string& path,
                                      int64_t n_windows) {
  const Tensor* o = st.find("trainer.epoch_order");
  if (!o || o->numel() != n_windows || o->dtype() != DType::Int64 || o->dim() != 1)
    throw TrainError(path + ": checkpoint lacks the interrupted epoch's batch order");
  std::vector<int64_t> order = o->to_vector<int64_t>();
  std::vector<bool> seen(size_t(n_windows), false);
  for (const int64_t i : order) {
    if (i < 0 || i >= n_windows || seen[size_t(i)])
      throw TrainError(path + ": checkpoint's trainer.epoch_order is not a permutation of 0.." +
                       std::to_string(n_windows - 1));
    seen[size_t(i)] = true;
  }
  return order;
}

// An integer option of the checkpoint's own run (merge_resume_options has checked its type).
int64_t stored_option(const SafeTensors& st, const std::string& path, const char* key) {
  const json::Value options = options_from_checkpoint(st, path);
  const json::Value* v = options.find(key);
  try {
    if (v && v->kind == json::Value::Kind::Number) return v->as_int();
  } catch (const json::Error&) {
  }
  throw TrainError(path + ": checkpoint option '" + key + "' must be an integer");
}

[[noreturn]] void bad_counter(const std::string& path, const char* key, int64_t v,
                              const std::string& why) {
  throw TrainError(path + ": checkpoint's '" + key + "' is " + std::to_string(v) + ", " + why);
}

// The counters follow from one another and from the options of the run that wrote them: a
// changed one would resume at a wrong place, schedule or Adam bias correction.
void check_counters(const SafeTensors& st, const std::string& path, const RunPosition& pos,
                    int64_t optimizer_step, int64_t n_batches) {
  const int64_t epochs = stored_option(st, path, "epochs");
  if (pos.epoch > epochs || (pos.epoch == epochs && pos.batch > 0))
    bad_counter(path, "epoch", pos.epoch,
                "past the " + std::to_string(epochs) + " epochs of the run that wrote it");
  int64_t steps = 0;  // an epoch count stored beside an explicit --epochs is unchecked: guarded
  if (__builtin_mul_overflow(pos.epoch, n_batches, &steps) ||
      __builtin_add_overflow(steps, pos.batch, &steps))
    bad_counter(path, "epoch", pos.epoch, "past any run's length");
  if (pos.global_step != steps - 1)
    bad_counter(path, "global_step", pos.global_step,
                "but epoch " + std::to_string(pos.epoch) + " and batch " +
                    std::to_string(pos.batch) + " of " + std::to_string(n_batches) +
                    " per epoch make it " + std::to_string(steps - 1));
  if (optimizer_step != steps)
    bad_counter(path, "optimizer_step", optimizer_step,
                "but global_step " + std::to_string(pos.global_step) + " makes it " +
                    std::to_string(steps));
  const auto old = st.metadata.find("step");  // before issue 23, a copy of optimizer_step
  if (old != st.metadata.end() && old->second != std::to_string(steps))
    throw TrainError(path + ": checkpoint's 'step' is '" + show_bytes(old->second) +
                     "' but its optimizer_step is " + std::to_string(steps));
  int64_t per_step = 0, tokens = 0;
  if (__builtin_mul_overflow(stored_option(st, path, "batch_size"),
                             stored_option(st, path, "context_length"), &per_step) ||
      per_step <= 0 || __builtin_mul_overflow(steps, per_step, &tokens) ||
      pos.tokens_seen != tokens)
    bad_counter(path, "tokens_seen", pos.tokens_seen,
                "but " + std::to_string(steps) + " steps of " + std::to_string(per_step) +
                    " tokens make it " + std::to_string(tokens));
  // EvalPoint::epoch counts from 1, the epoch in progress included.
  const int64_t last_epoch = pos.epoch + (pos.batch > 0 ? 1 : 0);
  for (const EvalPoint& p : pos.history)
    if (p.step < 0 || p.step > pos.global_step || p.epoch < 1 || p.epoch > last_epoch)
      throw TrainError(path + ": checkpoint's history has an evaluation at step " +
                       std::to_string(p.step) + ", epoch " + std::to_string(p.epoch) +
                       ", after the checkpoint's step " + std::to_string(pos.global_step) +
                       " (epoch " + std::to_string(last_epoch) + ")");
}

}  // namespace

RunPosition restore_checkpoint(const SafeTensors& st, const std::string& path, nn::GPTModel& model,
                               AdamW& optimizer, Generator& gen, int64_t n_batches,
                               int64_t n_windows) {
  load_weights(model, st, path);
  const auto params = model.named_parameters();
  for (size_t k = 0; k < params.size(); ++k) {
    for (auto* moments : {&optimizer.exp_avg, &optimizer.exp_avg_sq}) {
      const std::string key = std::string(moments == &optimizer.exp_avg ? "optimizer.exp_avg."
                                                                        : "optimizer.exp_avg_sq.") +
                              params[k].first;
      const Tensor* t = st.find(key);
      const std::string& name = params[k].first;
      if (!t || t->shape() != model.unpad(name, params[k].second).shape() ||
          t->dtype() != DType::Float32)
        throw TrainError(path + ": checkpoint lacks optimizer state '" + key + "'");
      check_finite(*t, key, path);
      (*moments)[k] = model.pad(name, *t).clone();
    }
  }
  RunPosition pos;
  optimizer.step_count = state_int(st, "optimizer_step", path);
  pos.global_step = state_int(st, "global_step", path);
  pos.tokens_seen = state_int(st, "tokens_seen", path);
  pos.epoch = state_int(st, "epoch", path);
  pos.batch = state_int(st, "batch", path);
  pos.seconds = state_real(st, "seconds", path);
  try {
    gen.set_state(unhex(state_str(st, "rng_state", path)));
  } catch (const TrainError&) {
    throw;
  } catch (const std::exception& e) {
    throw TrainError(path + ": checkpoint's rng_state is not a generator state (" + e.what() + ")");
  }
  pos.history = read_history(state_str(st, "history", path), path);
  if (pos.epoch < 0 || pos.global_step < -1 || pos.tokens_seen < 0 || optimizer.step_count < 0 ||
      pos.batch < 0 || pos.batch > n_batches)
    throw TrainError(path + ": checkpoint position is out of range (epoch " +
                     std::to_string(pos.epoch) + ", batch " + std::to_string(pos.batch) + " of " +
                     std::to_string(n_batches) + ", step " + std::to_string(pos.global_step) + ")");
  check_counters(st, path, pos, optimizer.step_count, n_batches);
  if (pos.batch > 0) pos.epoch_order = read_epoch_order(st, path, n_windows);
  return pos;
}

std::string checkpoint_path(const std::string& dir_or_file) {
  if (fs::is_directory(dir_or_file)) return (fs::path(dir_or_file) / kCheckpointFile).string();
  return dir_or_file;
}

LoadedModel load_checkpoint_model(const std::string& where) {
  const std::string path = checkpoint_path(where);
  const SafeTensors st = read_checkpoint(path);
  LoadedModel lm;
  lm.cfg = config_from_checkpoint(st, path);
  lm.preset = recipe_entry(st, path, "preset");
  lm.tokenizer = tokenizer_from_checkpoint(st, path);
  lm.tokenizer_spec = recipe_entry(st, path, "tokenizer");
  if (lm.tokenizer->n_vocab() > lm.cfg.vocab_size)
    throw TrainError(path + ": tokenizer has " + std::to_string(lm.tokenizer->n_vocab()) +
                     " tokens but the model's vocab_size is " + std::to_string(lm.cfg.vocab_size));
  lm.model = std::make_unique<nn::GPTModel>(lm.cfg);
  load_weights(*lm.model, st, path);
  lm.model->eval();
  return lm;
}

}  // namespace tg::train
