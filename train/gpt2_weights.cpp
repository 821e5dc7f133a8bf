// OpenAI's GPT-2 weights in Hugging Face's files into the book's GPTModel (see gpt2_weights.h).
#include "train/gpt2_weights.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <ostream>
#include <sstream>
#include <vector>

#include "core/autograd.h"
#include "core/file_io.h"
#include "core/json.h"
#include "core/safetensors.h"
#include "core/text.h"
#include "train/checkpoint.h"

namespace tg::train {

namespace fs = std::filesystem;

namespace {

// The largest config.json read (GPT-2's is under 1 KB).
constexpr uint64_t kMaxConfigBytes = 1 << 20;

int64_t config_int(const json::Value& obj, const char* key, const std::string& path) {
  const json::Value* v = obj.find(key);
  if (!v) throw TrainError(path + ": lacks \"" + key + "\" (a GPT-2 config.json has it)");
  const TrainError not_int(path + ": \"" + key + "\" must be an integer");
  if (v->kind != json::Value::Kind::Number) throw not_int;
  try {
    return v->as_int();
  } catch (const json::Error&) {
    throw not_int;
  }
}

// GPT-2's own settings, which the book's classes hard-code: refused when config.json differs.
void check_fixed_settings(const json::Value& obj, const std::string& path, int64_t n_embd) {
  if (const json::Value* a = obj.find("activation_function"))
    if (a->kind != json::Value::Kind::String || a->str != "gelu_new")
      throw TrainError(
          path + ": activation_function must be \"gelu_new\" (the book's GELU), got " +
          (a->kind == json::Value::Kind::String ? "\"" + a->str + "\"" : "a non-string"));
  if (const json::Value* e = obj.find("layer_norm_epsilon"))
    if (e->kind != json::Value::Kind::Number || std::abs(e->num - 1e-5) > 1e-12)
      throw TrainError(path + ": layer_norm_epsilon must be 1e-05 (the book's LayerNorm)");
  if (const json::Value* n = obj.find("n_inner"))
    if (n->kind != json::Value::Kind::Null && config_int(obj, "n_inner", path) != 4 * n_embd)
      throw TrainError(path + ": n_inner must be null or 4 * n_embd (the book's FeedForward)");
}

}  // namespace

nn::GPTConfig gpt2_config_from_json(const std::string& text, const std::string& path) {
  json::Value obj;
  try {
    obj = json::parse(text);
  } catch (const json::Error& e) {
    throw TrainError(path + ": " + e.what());
  }
  if (obj.kind != json::Value::Kind::Object) throw TrainError(path + ": not a JSON object");
  nn::GPTConfig cfg;  // the book's NEW_CONFIG: GPT_CONFIG_124M updated with the model's sizes
  cfg.vocab_size = config_int(obj, "vocab_size", path);
  cfg.context_length = config_int(obj, "n_positions", path);
  cfg.emb_dim = config_int(obj, "n_embd", path);
  cfg.n_layers = config_int(obj, "n_layer", path);
  cfg.n_heads = config_int(obj, "n_head", path);
  cfg.qkv_bias = true;
  cfg.drop_rate = 0.1;
  try {
    cfg.validate();
  } catch (const std::exception& e) {
    throw TrainError(path + ": " + e.what());
  }
  check_fixed_settings(obj, path, cfg.emb_dim);
  return cfg;
}

std::string read_gpt2_config_text(const std::string& dir) {
  if (!fs::is_directory(dir))
    throw TrainError(dir + ": not a directory (expected config.json and model.safetensors in it)");
  try {
    return read_regular_file((fs::path(dir) / "config.json").string(), kMaxConfigBytes,
                             "config.json");
  } catch (const std::exception& e) {
    throw TrainError(e.what());
  }
}

nn::GPTConfig read_gpt2_config(const std::string& dir) {
  return gpt2_config_from_json(read_gpt2_config_text(dir),
                               (fs::path(dir) / "config.json").string());
}

uint64_t gpt2_model_bytes(const nn::GPTConfig& c) {
  const uint64_t V = uint64_t(c.vocab_size), C = uint64_t(c.emb_dim),
                 P = uint64_t(c.context_length);
  const uint64_t per_block = 12 * C * C + 13 * C + P * P;  // + MultiHeadAttention's mask buffer
  return 4 * (2 * V * C + P * C + uint64_t(c.n_layers) * per_block + 2 * C);
}

namespace {

// ---- which tensors a GPT-2 file holds, and where each goes in the book's model ---------------

// One Hugging Face tensor: its shape for the config, and where the book's loader puts it.
struct Slot {
  std::string hf;       // name in the file, without "transformer."
  Shape shape;          // for the config
  bool buffer = false;  // a causal-mask buffer: checked, then skipped
  // Destinations: the book's parameter, the part of the last axis it takes (parts of `parts`), and
  // whether it is transposed (Conv1D in×out to Linear out×in).
  struct Dest {
    std::string book;
    int part, parts;
    bool transpose;
  };
  std::vector<Dest> to;
};

std::vector<Slot> gpt2_slots(const nn::GPTConfig& c) {
  const int64_t C = c.emb_dim, P = c.context_length;
  std::vector<Slot> s = {{"wte.weight",
                          {c.vocab_size, C},
                          false,
                          {{"tok_emb.weight", 0, 1, false}, {"out_head.weight", 0, 1, false}}},
                         {"wpe.weight", {P, C}, false, {{"pos_emb.weight", 0, 1, false}}}};
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string h = "h." + std::to_string(i) + ".",
                      b = "trf_blocks." + std::to_string(i) + ".";
    const auto qkv = [&](const char* what, bool transpose) {
      return std::vector<Slot::Dest>{{b + "att.W_query." + what, 0, 3, transpose},
                                     {b + "att.W_key." + what, 1, 3, transpose},
                                     {b + "att.W_value." + what, 2, 3, transpose}};
    };
    const std::vector<Slot> block = {
        {h + "ln_1.weight", {C}, false, {{b + "norm1.scale", 0, 1, false}}},
        {h + "ln_1.bias", {C}, false, {{b + "norm1.shift", 0, 1, false}}},
        {h + "attn.bias", {1, 1, P, P}, true, {}},
        {h + "attn.masked_bias", {}, true, {}},
        {h + "attn.c_attn.weight", {C, 3 * C}, false, qkv("weight", true)},
        {h + "attn.c_attn.bias", {3 * C}, false, qkv("bias", false)},
        {h + "attn.c_proj.weight", {C, C}, false, {{b + "att.out_proj.weight", 0, 1, true}}},
        {h + "attn.c_proj.bias", {C}, false, {{b + "att.out_proj.bias", 0, 1, false}}},
        {h + "ln_2.weight", {C}, false, {{b + "norm2.scale", 0, 1, false}}},
        {h + "ln_2.bias", {C}, false, {{b + "norm2.shift", 0, 1, false}}},
        {h + "mlp.c_fc.weight", {C, 4 * C}, false, {{b + "ff.layers.0.weight", 0, 1, true}}},
        {h + "mlp.c_fc.bias", {4 * C}, false, {{b + "ff.layers.0.bias", 0, 1, false}}},
        {h + "mlp.c_proj.weight", {4 * C, C}, false, {{b + "ff.layers.2.weight", 0, 1, true}}},
        {h + "mlp.c_proj.bias", {C}, false, {{b + "ff.layers.2.bias", 0, 1, false}}}};
    s.insert(s.end(), block.begin(), block.end());
  }
  s.push_back({"ln_f.weight", {C}, false, {{"final_norm.scale", 0, 1, false}}});
  s.push_back({"ln_f.bias", {C}, false, {{"final_norm.shift", 0, 1, false}}});
  s.push_back({"lm_head.weight", {c.vocab_size, C}, true, {}});  // tied to wte: not read
  return s;
}

// The file's tensors matched to slots: every name known, every shape and dtype right, every
// weight present. Returns slot index -> the file's entry.
std::map<size_t, const SafeTensorInfo*> match_tensors(const std::vector<Slot>& slots,
                                                      const SafeTensorsHeader& h,
                                                      const nn::GPTConfig& cfg) {
  const std::string& path = h.path;
  const std::string prefix = h.find("transformer.wte.weight") ? "transformer." : "";
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < slots.size(); ++i) by_name[slots[i].hf] = i;
  std::map<size_t, const SafeTensorInfo*> found;
  for (const SafeTensorInfo& t : h.tensors) {
    std::string name = t.name;
    if (!prefix.empty() && name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
    const auto it = by_name.find(name);
    if (it == by_name.end() || (name == t.name && name != "lm_head.weight" && !prefix.empty()))
      throw TrainError(path + ": unexpected tensor '" + show_name(t.name) +
                       "' (not part of a GPT-2 with " + "n_layer " + std::to_string(cfg.n_layers) +
                       ")");
    const Slot& s = slots[it->second];
    if (t.shape != s.shape)
      throw TrainError(path + ": '" + show_name(t.name) + "' is " + shape_str(t.shape) +
                       " but config.json " + "(n_embd " + std::to_string(cfg.emb_dim) +
                       ", n_positions " + std::to_string(cfg.context_length) + ", vocab_size " +
                       std::to_string(cfg.vocab_size) + ") needs " + shape_str(s.shape));
    if (!s.buffer && t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16")
      throw TrainError(path + ": '" + show_name(t.name) + "' has dtype " + show_name(t.dtype) +
                       "; GPT-2 weights are F32, F16 or BF16");
    found[it->second] = &t;
  }
  for (size_t i = 0; i < slots.size(); ++i)
    if (!slots[i].buffer && !found.count(i))
      throw TrainError(path + ": lacks '" + prefix + slots[i].hf + "' (config.json's n_layer is " +
                       std::to_string(cfg.n_layers) + ")");
  return found;
}

// ---- reading and placing one tensor ----------------------------------------------------------

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  float f;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    f = std::ldexp(float(mant), -24);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    bits |= sign;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  const uint32_t bits = exp == 0x1F ? sign | 0x7F800000u | (mant << 13)  // inf or NaN
                                    : sign | ((exp + 112) << 23) | (mant << 13);
  std::memcpy(&f, &bits, 4);
  return f;
}

// The tensor's values as float32 (F16 and BF16 widened exactly).
std::vector<float> read_floats(const SafeTensorsHeader& h, const SafeTensorInfo& t) {
  const size_t bytes = size_t(t.end - t.begin);
  std::vector<float> out(t.dtype == "F32" ? bytes / 4 : bytes / 2);
  if (t.dtype == "F32") {
    read_safetensors_bytes(h, t, reinterpret_cast<char*>(out.data()));
  } else {
    std::vector<uint16_t> half(out.size());
    read_safetensors_bytes(h, t, reinterpret_cast<char*>(half.data()));
    for (size_t i = 0; i < half.size(); ++i) {
      if (t.dtype == "F16") {
        out[i] = half_to_float(half[i]);
      } else {  // BF16: float32's upper half
        const uint32_t bits = uint32_t(half[i]) << 16;
        std::memcpy(&out[i], &bits, 4);
      }
    }
  }
  for (const float x : out)
    if (!std::isfinite(x))
      throw TrainError(h.path + ": '" + show_name(t.name) + "' holds NaN or infinite values");
  return out;
}

// src viewed as [rows, cols] (a 1-D tensor is one row): the part-th of `parts` column blocks goes
// to dst, transposed or not; untransposed, only the rows dst has (wpe for a shorter context).
void place(const std::vector<float>& src, const Shape& shape, const Slot::Dest& d, Tensor& dst) {
  const int64_t cols = shape.empty() ? 1 : shape.back();
  const int64_t w = cols / d.parts, c0 = d.part * w;
  int64_t rows = int64_t(src.size()) / std::max<int64_t>(cols, 1);
  if (!d.transpose) rows = std::min(rows, dst.numel() / std::max<int64_t>(w, 1));
  float* out = dst.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < w; ++o)
      out[d.transpose ? o * rows + r : r * w + o] = src[size_t(r * cols + c0 + o)];
}

std::string gigabytes(uint64_t bytes) {
  std::ostringstream os;
  os.precision(3);
  if (bytes < 1'000'000'000)
    os << double(bytes) / 1e6 << " MB";
  else
    os << double(bytes) / 1e9 << " GB";
  return os.str();
}

// Which of OpenAI's four models a config has the shape of.
std::string shape_name(const nn::GPTConfig& c) {
  if (c.vocab_size != 50257 || c.context_length != 1024) return "GPT-2-style";
  if (c.n_layers == 12 && c.emb_dim == 768) return "gpt2 (124M)";
  if (c.n_layers == 24 && c.emb_dim == 1024) return "gpt2-medium (355M)";
  if (c.n_layers == 36 && c.emb_dim == 1280) return "gpt2-large (774M)";
  if (c.n_layers == 48 && c.emb_dim == 1600) return "gpt2-xl (1558M)";
  return "GPT-2-style";
}

}  // namespace

std::string gpt2_memory_note(const nn::GPTConfig& cfg, const std::string& dir, uint64_t ram) {
  const uint64_t C = uint64_t(cfg.emb_dim);
  const uint64_t params = uint64_t(cfg.vocab_size + cfg.context_length) * C +
                          uint64_t(cfg.n_layers) * (12 * C * C + 13 * C) + 2 * C;
  const uint64_t need = gpt2_model_bytes(cfg);
  std::ostringstream os;
  os.precision(4);
  os << dir << ": " << shape_name(cfg) << ", n_layer " << cfg.n_layers << ", n_embd " << C
     << ", n_head " << cfg.n_heads << ", " << double(params) / 1e6 << "M parameters ("
     << gigabytes(4 * params) << " in float32); the GPTModel takes " << gigabytes(need)
     << " (out_head and the causal masks of its own)";
  if (ram > 0 && need > ram)
    throw TrainError(os.str() + ", more than this machine's " + gigabytes(ram) + " of memory");
  return os.str();
}

uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

namespace {

// DIR's model.safetensors checked against config.json's sizes (every tensor named, shaped and
// typed as cfg says), before any model is allocated. Not movable: `found` points into `header`.
struct Gpt2File {
  SafeTensorsHeader header;
  std::vector<Slot> slots;
  std::map<size_t, const SafeTensorInfo*> found;

  Gpt2File(const std::string& dir, const nn::GPTConfig& cfg) : slots(gpt2_slots(cfg)) {
    try {
      header = read_safetensors_header((fs::path(dir) / "model.safetensors").string());
    } catch (const std::exception& e) {
      throw TrainError(e.what());
    }
    found = match_tensors(slots, header, cfg);
  }
  Gpt2File(const Gpt2File&) = delete;
  Gpt2File& operator=(const Gpt2File&) = delete;

  // Every tensor into model's parameters (names as the book's), widened to float32.
  void copy_into(nn::GPTModel& model, std::ostream& notes) const {
    std::map<std::string, Tensor> params;
    for (const auto& [name, t] : model.named_parameters()) params.emplace(name, t);
    NoGradGuard no_grad;
    std::string converted;
    for (const auto& [slot_index, info] : found) {
      const Slot& slot = slots[slot_index];
      if (slot.buffer) continue;
      std::vector<float> values;
      try {
        values = read_floats(header, *info);
      } catch (const TrainError&) {
        throw;
      } catch (const std::exception& e) {
        throw TrainError(e.what());
      }
      for (const Slot::Dest& d : slot.to) place(values, info->shape, d, params.at(d.book));
      if (info->dtype != "F32" && converted.find(info->dtype) == std::string::npos)
        converted += (converted.empty() ? "" : " and ") + info->dtype;
    }
    if (!converted.empty())
      notes << header.path << ": " << converted << " weights widened to float32\n";
  }
};

}  // namespace

void load_gpt2_weights_into(nn::GPTModel& model, const std::string& dir,
                            const nn::GPTConfig& file_cfg, std::ostream& notes) {
  const Gpt2File file(dir, file_cfg);
  if (model.cfg.context_length > file_cfg.context_length)
    throw TrainError((fs::path(dir) / "config.json").string() + ": n_positions is " +
                     std::to_string(file_cfg.context_length) + ", a context of " +
                     std::to_string(model.cfg.context_length) + " needs more");
  nn::GPTConfig sizes = file_cfg;  // the model may keep fewer positions and its own dropout
  sizes.context_length = model.cfg.context_length;
  sizes.drop_rate = model.cfg.drop_rate;
  if (!(model.cfg == sizes))
    throw TrainError(dir + ": a model of config " + model.cfg.str() + " cannot take weights of " +
                     file_cfg.str());
  notes << gpt2_memory_note(model.cfg, dir, physical_memory_bytes()) << "\n";
  file.copy_into(model, notes);
}

std::unique_ptr<nn::GPTModel> load_gpt2_weights(const std::string& dir,
                                                const nn::GPTConfig& file_cfg,
                                                std::ostream& notes) {
  const Gpt2File file(dir, file_cfg);
  // Said, and refused above the machine's memory, before the model is allocated.
  notes << gpt2_memory_note(file_cfg, dir, physical_memory_bytes()) << "\n";
  auto model = std::make_unique<nn::GPTModel>(file_cfg);
  file.copy_into(*model, notes);
  model->eval();
  return model;
}

std::unique_ptr<data::Tokenizer> load_gpt2_tokenizer(const std::string& dir, int64_t vocab_size) {
  const fs::path vocab = fs::path(dir) / "vocab.json", merges = fs::path(dir) / "merges.txt";
  const bool has_vocab = fs::exists(vocab), has_merges = fs::exists(merges);
  if (has_vocab != has_merges)
    throw TrainError(dir + ": has " +
                     (has_vocab ? "vocab.json but no merges.txt" : "merges.txt but no vocab.json") +
                     " (a GPT-2 tokenizer needs both)");
  std::unique_ptr<data::Tokenizer> tok;
  try {
    tok = std::make_unique<data::Tokenizer>(
        has_vocab ? data::Tokenizer::from_gpt2_files(vocab.string(), merges.string())
                  : data::Tokenizer::gpt2());
  } catch (const std::exception& e) {
    throw TrainError(e.what());
  }
  // Said before the weights load: which tokenizer, and config.json's size it must fit.
  if (tok->n_vocab() > vocab_size)
    throw TrainError(dir + ": " +
                     (has_vocab
                          ? "its vocab.json + merges.txt have "
                          : "GPT-2's tokenizer (the folder has no vocab.json + merges.txt) has ") +
                     std::to_string(tok->n_vocab()) +
                     " tokens but its config.json's vocab_size is " + std::to_string(vocab_size));
  return tok;
}

LoadedModel load_gpt2_model(const std::string& dir, std::ostream& notes) {
  // A missing directory or config before the tokenizer, the tokenizer before the weights.
  const nn::GPTConfig cfg = read_gpt2_config(dir);
  LoadedModel lm;
  lm.tokenizer = load_gpt2_tokenizer(dir, cfg.vocab_size);
  lm.model = load_gpt2_weights(dir, cfg, notes);
  lm.cfg = lm.model->cfg;
  lm.preset = "gpt2-hf";
  lm.tokenizer_spec = "gpt2";
  return lm;
}

std::vector<NamedPath> gpt2_input_files(const std::string& dir, const std::string& role) {
  std::vector<NamedPath> files;
  for (const char* name : {"config.json", "model.safetensors", "vocab.json", "merges.txt"})
    files.push_back({(std::filesystem::path(dir) / name).string(), "the " + role + " folder's"});
  return files;
}

}  // namespace tg::train
