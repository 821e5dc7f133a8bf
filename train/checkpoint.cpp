// Training checkpoints (see checkpoint.h).
#include "train/checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <limits>

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

// The tokenizer's description for the checkpoint: merges for a trained BPE, nothing for gpt2.
void tokenizer_to_checkpoint(const std::string& spec, const data::Tokenizer& tok,
                             std::vector<std::pair<std::string, Tensor>>& tensors, Metadata& md) {
  md["tokenizer"] = spec;
  if (spec == "gpt2") return;
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

// Copies the checkpoint's state_dict entries into the model; every name must be present with
// the model's shape.
void load_weights(nn::GPTModel& model, const SafeTensors& st, const std::string& path) {
  nn::NamedTensors sd;
  for (const auto& [name, t] : model.state_dict()) {
    const Tensor* src = st.find(name);
    if (!src) throw TrainError(path + ": checkpoint lacks '" + name + "' (another model?)");
    if (src->shape() != t.shape() || src->dtype() != t.dtype())
      throw TrainError(path + ": '" + name + "' is " + shape_str(src->shape()) +
                       " in the checkpoint but " + shape_str(t.shape()) +
                       " in this model (a checkpoint from another config)");
    sd.emplace_back(name, *src);
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

nn::GPTConfig config_from_checkpoint(const SafeTensors& st, const std::string& path) {
  const auto f = st.metadata.find("format");
  if (f == st.metadata.end() || f->second != kFormat)
    throw TrainError(path + ": not a tapegrad checkpoint (metadata format is not " +
                     std::string(kFormat) + ")");
  const auto c = st.metadata.find("config");
  if (c == st.metadata.end()) throw TrainError(path + ": checkpoint has no config");
  try {
    nn::GPTConfig cfg = nn::GPTConfig::parse(c->second);
    cfg.validate();
    return cfg;
  } catch (const std::exception& e) {
    throw TrainError(path + ": " + e.what());
  }
}

std::unique_ptr<data::Tokenizer> tokenizer_from_checkpoint(const SafeTensors& st,
                                                           const std::string& path) {
  const auto it = st.metadata.find("tokenizer");
  if (it == st.metadata.end()) throw TrainError(path + ": checkpoint has no tokenizer entry");
  if (it->second == "gpt2") {
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
    throw TrainError(path + ": checkpoint's tokenizer '" + it->second + "' lacks its merges");
  std::vector<std::pair<int, int>> merges;
  const std::vector<int64_t> v = m->to_vector<int64_t>();
  for (size_t i = 0; i + 1 < v.size(); i += 2) merges.emplace_back(int(v[i]), int(v[i + 1]));
  std::vector<std::pair<std::string, int>> specials;
  try {
    for (const json::Value& e : json::parse(sp->second).items)
      specials.emplace_back(e.items.at(0).str, int(e.items.at(1).as_int()));
    return std::make_unique<data::Tokenizer>(data::Tokenizer::from_merges(merges, specials));
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
  config_from_checkpoint(st, path);  // checks the format
  return st;
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
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : model.state_dict()) tensors.emplace_back(name, t);
  const auto params = model.named_parameters();
  for (size_t k = 0; k < params.size(); ++k)
    tensors.emplace_back("optimizer.exp_avg." + params[k].first, optimizer.exp_avg[k]);
  for (size_t k = 0; k < params.size(); ++k)
    tensors.emplace_back("optimizer.exp_avg_sq." + params[k].first, optimizer.exp_avg_sq[k]);
  if (pos.batch > 0)
    tensors.emplace_back("trainer.epoch_order",
                         from_vector(pos.epoch_order, {int64_t(pos.epoch_order.size())}));
  Metadata md;
  md["format"] = kFormat;
  md["config"] = recipe.cfg.str();
  md["preset"] = recipe.preset;
  md["options"] = recipe.options_json;
  md["optimizer"] = "AdamW";
  md["optimizer_step"] = std::to_string(optimizer.step_count);
  md["global_step"] = std::to_string(pos.global_step);
  md["step"] = std::to_string(pos.global_step + 1);  // optimizer steps taken
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
    hist += std::string("{\"epoch\":") + std::to_string(p.epoch) +
            ",\"step\":" + std::to_string(p.step) +
            ",\"tokens_seen\":" + std::to_string(p.tokens_seen) +
            ",\"train_loss\":" + json::number(p.train_loss) +
            ",\"val_loss\":" + json::number(p.val_loss) + ",\"lr\":" + json::number(p.lr) +
            ",\"seconds\":" + json::number(p.seconds) + "}";
  }
  md["history"] = hist + "]";
  tokenizer_to_checkpoint(recipe.tokenizer_spec, recipe.tokenizer, tensors, md);
  try {
    save_safetensors(path, tensors, md);
  } catch (const std::exception& e) {
    throw TrainError(e.what());
  }
}

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
      if (!t || t->shape() != params[k].second.shape())
        throw TrainError(path + ": checkpoint lacks optimizer state '" + key + "'");
      (*moments)[k] = t->clone();
    }
  }
  RunPosition pos;
  try {
    optimizer.step_count = std::stoll(st.metadata.at("optimizer_step"));
    pos.global_step = std::stoll(st.metadata.at("global_step"));
    pos.tokens_seen = std::stoll(st.metadata.at("tokens_seen"));
    pos.epoch = std::stoll(st.metadata.at("epoch"));
    pos.batch = std::stoll(st.metadata.at("batch"));
    pos.seconds = std::stod(st.metadata.at("seconds"));
    gen.set_state(unhex(st.metadata.at("rng_state")));
    for (const json::Value& e : json::parse(st.metadata.at("history")).items) {
      auto integer = [&](const char* k) {
        const json::Value* v = e.find(k);
        if (!v || v->kind != json::Value::Kind::Number)
          throw TrainError(path + ": checkpoint history entry lacks '" + k + "'");
        return v->as_int();
      };
      EvalPoint p;
      p.epoch = integer("epoch");
      p.step = integer("step");
      p.tokens_seen = integer("tokens_seen");
      auto d = [&](const char* k) {
        const json::Value* v = e.find(k);
        return v && v->kind == json::Value::Kind::Number ? v->num
                                                         : std::numeric_limits<double>::quiet_NaN();
      };
      p.train_loss = d("train_loss");
      p.val_loss = d("val_loss");
      p.lr = d("lr");
      p.seconds = d("seconds");
      pos.history.push_back(p);
    }
  } catch (const TrainError&) {
    throw;
  } catch (const std::exception& e) {
    throw TrainError(path + ": checkpoint training state is incomplete (" + e.what() + ")");
  }
  if (pos.epoch < 0 || pos.global_step < -1 || pos.tokens_seen < 0 || optimizer.step_count < 0 ||
      pos.batch < 0 || pos.batch > n_batches)
    throw TrainError(path + ": checkpoint position is out of range (epoch " +
                     std::to_string(pos.epoch) + ", batch " + std::to_string(pos.batch) + " of " +
                     std::to_string(n_batches) + ", step " + std::to_string(pos.global_step) + ")");
  if (pos.batch > 0) {
    const Tensor* o = st.find("trainer.epoch_order");
    if (!o || o->numel() != n_windows)
      throw TrainError(path + ": checkpoint lacks the interrupted epoch's batch order");
    pos.epoch_order = o->to_vector<int64_t>();
  }
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
  lm.preset = st.metadata.count("preset") ? st.metadata.at("preset") : "";
  lm.tokenizer = tokenizer_from_checkpoint(st, path);
  lm.tokenizer_spec = st.metadata.at("tokenizer");  // present: tokenizer_from_checkpoint checked
  if (lm.tokenizer->n_vocab() > lm.cfg.vocab_size)
    throw TrainError(path + ": tokenizer has " + std::to_string(lm.tokenizer->n_vocab()) +
                     " tokens but the model's vocab_size is " + std::to_string(lm.cfg.vocab_size));
  lm.model = std::make_unique<nn::GPTModel>(lm.cfg);
  load_weights(*lm.model, st, path);
  lm.model->eval();
  return lm;
}

}  // namespace tg::train
