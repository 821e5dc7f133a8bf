// Chapter 4's GPT (see gpt.h).
#include "nn/gpt.h"

#include <stdexcept>

#include "core/autograd.h"
#include "core/json.h"
#include "core/ops.h"

namespace tg::nn {

// ---- GPTConfig -------------------------------------------------------------------------------

bool is_attention_route(const std::string& name) {
  for (const char* r : kAttentionRoutes)
    if (name == r) return true;
  return false;
}

std::string attention_routes_text() {
  std::string out;
  for (size_t i = 0; i < kAttentionRoutes.size(); ++i)
    out += std::string(i == 0                             ? ""
                       : i + 1 == kAttentionRoutes.size() ? " or "
                                                          : ", ") +
           kAttentionRoutes[i];
  return out;
}

std::string GPTConfig::str() const {
  return json::object({{"vocab_size", std::to_string(vocab_size)},
                       {"context_length", std::to_string(context_length)},
                       {"emb_dim", std::to_string(emb_dim)},
                       {"n_heads", std::to_string(n_heads)},
                       {"n_layers", std::to_string(n_layers)},
                       {"drop_rate", json::number(drop_rate)},
                       {"qkv_bias", qkv_bias ? "true" : "false"}});
}

int64_t GPTConfig::padded_vocab_size() const {
  return (vocab_size + pad_vocab - 1) / pad_vocab * pad_vocab;
}

bool GPTConfig::operator==(const GPTConfig& o) const {
  return vocab_size == o.vocab_size && context_length == o.context_length && emb_dim == o.emb_dim &&
         n_heads == o.n_heads && n_layers == o.n_layers && drop_rate == o.drop_rate &&
         qkv_bias == o.qkv_bias;
}

void GPTConfig::validate() const {
  auto positive = [](const char* name, int64_t v) {
    if (v < 1)
      throw std::invalid_argument(std::string("GPT config: ") + name + " must be >= 1, got " +
                                  std::to_string(v));
  };
  // Upper bounds far above any GPT this engine can train, so that a corrupt config is refused
  // by name instead of allocating until the machine runs out of memory.
  auto at_most = [](const char* name, int64_t v, int64_t hi) {
    if (v > hi)
      throw std::invalid_argument(std::string("GPT config: ") + name + " must be <= " +
                                  std::to_string(hi) + ", got " + std::to_string(v));
  };
  positive("vocab_size", vocab_size);
  positive("context_length", context_length);
  positive("emb_dim", emb_dim);
  positive("n_heads", n_heads);
  positive("n_layers", n_layers);
  at_most("vocab_size", vocab_size, int64_t(1) << 22);
  at_most("context_length", context_length, int64_t(1) << 20);
  at_most("emb_dim", emb_dim, int64_t(1) << 16);
  at_most("n_layers", n_layers, 1024);
  if (emb_dim % n_heads != 0)
    throw std::invalid_argument("GPT config: emb_dim (" + std::to_string(emb_dim) +
                                ") must be divisible by n_heads (" + std::to_string(n_heads) + ")");
  if (!(drop_rate >= 0 && drop_rate < 1))
    throw std::invalid_argument("GPT config: drop_rate must be in [0, 1), got " +
                                std::to_string(drop_rate));
  if (pad_vocab < 1 || pad_vocab > kMaxPadVocab)
    throw std::invalid_argument("GPT config: pad_vocab must be in 1.." +
                                std::to_string(kMaxPadVocab) + ", got " +
                                std::to_string(pad_vocab));
  if (!is_attention_route(attention))
    throw std::invalid_argument("GPT config: attention must be " + attention_routes_text() +
                                ", got '" + attention + "'");
}

namespace {

[[noreturn]] void config_error(const json::Value& v, const char* key, const std::string& want) {
  throw std::invalid_argument("GPT config: " + std::to_string(v.pos.line) + ":" +
                              std::to_string(v.pos.col) + ": \"" + key + "\" must be " + want);
}

// The member `key` of a config object, of the kind `want` names.
const json::Value& config_field(const json::Value& obj, const std::string& text, const char* key,
                                json::Value::Kind kind, const char* want) {
  const json::Value* v = obj.find(key);
  if (!v)
    throw std::invalid_argument(std::string("GPT config: missing \"") + key + "\" in " + text);
  if (v->kind != kind) config_error(*v, key, want);
  return *v;
}

}  // namespace

GPTConfig GPTConfig::parse(const std::string& text) {
  json::Value obj;
  try {
    obj = json::parse(text);
  } catch (const json::Error& e) {
    throw std::invalid_argument(std::string("GPT config: ") + e.what());
  }
  if (obj.kind != json::Value::Kind::Object)
    throw std::invalid_argument("GPT config: expected a JSON object, got " + text);
  using Kind = json::Value::Kind;
  const auto integer = [&](const char* key) {
    const json::Value& v = config_field(obj, text, key, Kind::Number, "an integer");
    try {
      return v.as_int();
    } catch (const json::Error&) {
      config_error(v, key, "an integer, got " + v.str);
    }
  };
  GPTConfig c;
  c.vocab_size = integer("vocab_size");
  c.context_length = integer("context_length");
  c.emb_dim = integer("emb_dim");
  c.n_heads = integer("n_heads");
  c.n_layers = integer("n_layers");
  c.drop_rate = config_field(obj, text, "drop_rate", Kind::Number, "a number").num;
  c.qkv_bias = config_field(obj, text, "qkv_bias", Kind::Bool, "true or false").b;
  return c;
}

GPTConfig gpt_preset(const std::string& name) {
  GPTConfig c;  // the defaults are GPT_CONFIG_124M with context 256
  if (name == "gpt2-124m") return c;
  if (name == "tiny") {
    // Small enough to train on a few tens of KB in about a minute on two cores.
    c.vocab_size = 512;  // replaced by the tokenizer's vocabulary size
    c.context_length = 64;
    c.emb_dim = 128;
    c.n_heads = 4;
    c.n_layers = 2;
    return c;
  }
  throw std::invalid_argument("unknown preset '" + name + "' (known: gpt2-124m, tiny)");
}

int64_t gpt_preset_max_context(const std::string& name) {
  if (name == "gpt2-124m") return 1024;
  if (name == "tiny") return 256;
  gpt_preset(name);  // throws the unknown-preset message
  return 0;
}

// ---- FeedForward -----------------------------------------------------------------------------

FeedForward::FeedForward(const GPTConfig& cfg, Generator* gen) : Module("FeedForward") {
  // Sequential(Linear(emb, 4*emb), GELU(), Linear(4*emb, emb)): the first Linear draws first.
  auto up = std::make_shared<Linear>(cfg.emb_dim, 4 * cfg.emb_dim, true, gen);
  auto act = std::make_shared<GELU>();
  auto down = std::make_shared<Linear>(4 * cfg.emb_dim, cfg.emb_dim, true, gen);
  register_module(
      "layers", &layers,
      std::make_shared<Sequential>(std::vector<std::shared_ptr<Module>>{up, act, down}));
}

Tensor FeedForward::forward(const Tensor& x) { return (*layers)(x); }

// ---- TransformerBlock ------------------------------------------------------------------------

TransformerBlock::TransformerBlock(const GPTConfig& cfg, Generator* gen)
    : Module("TransformerBlock") {
  // The book's MultiHeadAttention, or the same module with its attention core fused.
  std::shared_ptr<MultiHeadAttention> mha =
      cfg.attention == kAttentionBook
          ? std::make_shared<MultiHeadAttention>(cfg.emb_dim, cfg.emb_dim, cfg.context_length,
                                                 cfg.drop_rate, cfg.n_heads, cfg.qkv_bias, gen)
          : std::make_shared<MultiHeadAttentionSDPA>(cfg.emb_dim, cfg.emb_dim, cfg.context_length,
                                                     cfg.drop_rate, cfg.n_heads, cfg.qkv_bias, gen);
  register_module("att", &att, std::move(mha));
  register_module("ff", &ff, std::make_shared<FeedForward>(cfg, gen));
  register_module("norm1", &norm1, std::make_shared<LayerNorm>(cfg.emb_dim));
  register_module("norm2", &norm2, std::make_shared<LayerNorm>(cfg.emb_dim));
  register_module("drop_shortcut", &drop_shortcut, std::make_shared<Dropout>(cfg.drop_rate, gen));
}

Tensor TransformerBlock::forward(const Tensor& x) { return forward(x, false); }

Tensor TransformerBlock::forward(const Tensor& x, bool use_cache) {
  // Shortcut connection for the attention block
  Tensor shortcut = x;
  Tensor h = (*norm1)(x);
  h = att->forward(h, use_cache);  // (b, T, emb_dim); without the cache the book's att(h)
  h = (*drop_shortcut)(h);
  h = h + shortcut;  // add the original input back

  // Shortcut connection for the feed-forward block
  shortcut = h;
  Tensor y = (*norm2)(h);
  y = (*ff)(y);
  y = (*drop_shortcut)(y);
  return y + shortcut;
}

// ---- GPTModel --------------------------------------------------------------------------------

namespace {
const GPTConfig& validated(const GPTConfig& cfg) {
  cfg.validate();
  return cfg;
}
}  // namespace

GPTModel::GPTModel(const GPTConfig& config, Generator* gen)
    : Module("GPTModel"), cfg(validated(config)) {
  register_module("tok_emb", &tok_emb,
                  std::make_shared<Embedding>(cfg.vocab_size, cfg.emb_dim, gen));
  register_module("pos_emb", &pos_emb,
                  std::make_shared<Embedding>(cfg.context_length, cfg.emb_dim, gen));
  register_module("drop_emb", &drop_emb, std::make_shared<Dropout>(cfg.drop_rate, gen));
  std::vector<std::shared_ptr<Module>> blocks;
  for (int64_t i = 0; i < cfg.n_layers; ++i)
    blocks.push_back(std::make_shared<TransformerBlock>(cfg, gen));
  register_module("trf_blocks", &trf_blocks, std::make_shared<Sequential>(std::move(blocks)));
  register_module("final_norm", &final_norm, std::make_shared<LayerNorm>(cfg.emb_dim));
  register_module("out_head", &out_head,
                  std::make_shared<Linear>(cfg.emb_dim, cfg.vocab_size, false, gen));
  // New (--pad-vocab): zero rows after the book's draws, which stay vocab_size rows, so the
  // generator moves on as the book's does. Zero rows give zero logits, which the loss excludes;
  // their gradient is then 0 and AdamW keeps them 0 (p·(1 − lr·wd) = 0, m = v = 0).
  const int64_t padded = cfg.padded_vocab_size();
  if (padded > cfg.vocab_size) {
    NoGradGuard no_grad;
    out_head->weight =
        cat({out_head->weight, zeros({padded - cfg.vocab_size, cfg.emb_dim})}).requires_grad_();
    out_head->out_features = padded;
  }
}

Tensor GPTModel::forward(const Tensor& in_idx) { return forward(in_idx, false); }

Tensor GPTModel::forward(const Tensor& in_idx, bool use_cache, bool last_only) {
  if (in_idx.dtype() != DType::Int64 || in_idx.dim() != 2)
    throw std::invalid_argument(std::string("GPTModel: expected int64 token ids (batch, tokens), "
                                            "got ") +
                                dtype_name(in_idx.dtype()) + " " + shape_str(in_idx.shape()));
  const int64_t seq_len = in_idx.size(1);
  if (seq_len < 1 || seq_len > cfg.context_length)
    throw std::invalid_argument("GPTModel: " + std::to_string(seq_len) +
                                " tokens, the context length is " +
                                std::to_string(cfg.context_length));
  // New: with the cache, the tokens continue the cached positions
  const int64_t pos0 = use_cache ? current_pos : 0;
  if (pos0 + seq_len > cfg.context_length)
    throw std::invalid_argument("GPTModel: the KV cache holds " + std::to_string(pos0) + " of " +
                                std::to_string(cfg.context_length) + " positions, " +
                                std::to_string(seq_len) + " more do not fit (reset_kv_cache())");
  const Tensor tok_embeds = (*tok_emb)(in_idx);  // (b, T, emb_dim)
  const Tensor pos_embeds = (*pos_emb)(
      pos0 == 0 ? arange(seq_len) : arange(double(pos0), double(pos0 + seq_len), 1, DType::Int64));
  Tensor x = tok_embeds + pos_embeds;  // broadcast over the batch
  x = (*drop_emb)(x);
  if (use_cache) {
    for (const auto& blk : *trf_blocks) x = static_cast<TransformerBlock&>(*blk).forward(x, true);
    current_pos += seq_len;
  } else {
    x = (*trf_blocks)(x);
  }
  x = (*final_norm)(x);
  if (last_only) x = x.slice(1, seq_len - 1, seq_len);  // New: the row generation reads
  return (*out_head)(x);  // (b, T, vocab_size), or (b, 1, vocab_size) with last_only (padded)
}

Tensor GPTModel::unpad(const std::string& name, const Tensor& t) const {
  if (name != "out_head.weight" || !t.defined() || t.size(0) == cfg.vocab_size) return t;
  return t.slice(0, 0, cfg.vocab_size);  // the first rows: contiguous
}

Tensor GPTModel::pad(const std::string& name, const Tensor& t) const {
  const int64_t padded = cfg.padded_vocab_size();
  if (name != "out_head.weight" || !t.defined() || t.size(0) == padded) return t;
  return cat({t, zeros({padded - t.size(0), t.size(1)}, t.dtype())});
}

void GPTModel::reset_kv_cache() {
  for (const auto& blk : *trf_blocks) static_cast<TransformerBlock&>(*blk).att->reset_cache();
  current_pos = 0;
}

}  // namespace tg::nn
