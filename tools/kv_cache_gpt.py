"""PyTorch peer of bench/bench_generate: the book's GPTModel with its bonus KV cache, generating.

    python tools/kv_cache_gpt.py --model gpt2-124m --new-tokens 256 --threads 1 [--no-cache] [--reps 3]

Written after the book's bonus code ch04/03_kv-cache (gpt_with_kv_cache.py: `use_cache`,
`reset_kv_cache`, `current_pos`; gpt_with_kv_cache_optimized.py: the cache preallocated as
(b, num_heads, context_length, head_dim) instead of torch.cat per token), with the book's §5.5
config for GPT-2 (context 1024, qkv_bias) and random weights. The loop is tapegrad's
generate_cached: the prompt runs once, each new token is one row; past context_length the book's
generate() crops the context, which moves every position, so the cache is rebuilt from the cropped
context then. Greedy decoding. Prints one JSON line: the model, tokens, threads, seconds of every
rep, tokens/s of the best, and the generated ids' checksum.

Needs torch (PyTorch 2.x for the bench's figures: /work/shared/tools/torch2-python; 1.13 works).
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn

CONFIGS = {"gpt2-124m": (768, 12, 12), "gpt2-medium": (1024, 24, 16)}


class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length),
                                                diagonal=1), persistent=False)
        # NEW (the optimized bonus variant): a preallocated cache and its fill pointer
        self.register_buffer("cache_k", None, persistent=False)
        self.register_buffer("cache_v", None, persistent=False)
        self.ptr_current_pos = 0

    def forward(self, x, use_cache=False):
        b, num_tokens, _ = x.shape
        keys_new = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        values_new = self.W_value(x).view(b, num_tokens, self.num_heads,
                                          self.head_dim).transpose(1, 2)
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        start = self.ptr_current_pos if use_cache else 0
        if use_cache:
            if self.cache_k is None or self.cache_k.size(0) != b:
                self.cache_k = torch.zeros(b, self.num_heads, self.context_length, self.head_dim)
                self.cache_v = torch.zeros_like(self.cache_k)
            self.cache_k[:, :, start:start + num_tokens] = keys_new
            self.cache_v[:, :, start:start + num_tokens] = values_new
            self.ptr_current_pos += num_tokens
            keys = self.cache_k[:, :, :self.ptr_current_pos]
            values = self.cache_v[:, :, :self.ptr_current_pos]
        else:
            keys, values = keys_new, values_new
        attn_scores = queries @ keys.transpose(2, 3)
        mask_bool = self.mask.bool()[start:start + num_tokens, :keys.size(2)]
        attn_scores.masked_fill_(mask_bool, -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        context_vec = (attn_weights @ values).transpose(1, 2)
        context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)
        return self.out_proj(context_vec)

    def reset_cache(self):
        self.cache_k, self.cache_v, self.ptr_current_pos = None, None, 0


class LayerNorm(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.eps = 1e-5
        self.scale = nn.Parameter(torch.ones(emb_dim))
        self.shift = nn.Parameter(torch.zeros(emb_dim))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.scale * (x - mean) / torch.sqrt(var + self.eps) + self.shift


class GELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


class TransformerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.att = MultiHeadAttention(cfg["emb_dim"], cfg["emb_dim"], cfg["context_length"],
                                      cfg["drop_rate"], cfg["n_heads"], cfg["qkv_bias"])
        self.ff = nn.Sequential(nn.Linear(cfg["emb_dim"], 4 * cfg["emb_dim"]), GELU(),
                                nn.Linear(4 * cfg["emb_dim"], cfg["emb_dim"]))
        self.norm1, self.norm2 = LayerNorm(cfg["emb_dim"]), LayerNorm(cfg["emb_dim"])
        self.drop_shortcut = nn.Dropout(cfg["drop_rate"])

    def forward(self, x, use_cache=False):
        x = x + self.drop_shortcut(self.att(self.norm1(x), use_cache=use_cache))
        return x + self.drop_shortcut(self.ff(self.norm2(x)))


class GPTModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
        self.drop_emb = nn.Dropout(cfg["drop_rate"])
        self.trf_blocks = nn.ModuleList([TransformerBlock(cfg) for _ in range(cfg["n_layers"])])
        self.current_pos = 0
        self.final_norm = LayerNorm(cfg["emb_dim"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

    def forward(self, in_idx, use_cache=False):
        _, seq_len = in_idx.shape
        start = self.current_pos if use_cache else 0
        pos_ids = torch.arange(start, start + seq_len, dtype=torch.long)
        if use_cache:
            self.current_pos += seq_len
        x = self.drop_emb(self.tok_emb(in_idx) + self.pos_emb(pos_ids).unsqueeze(0))
        for blk in self.trf_blocks:
            x = blk(x, use_cache=use_cache)
        return self.out_head(self.final_norm(x))

    def reset_kv_cache(self):
        for blk in self.trf_blocks:
            blk.att.reset_cache()
        self.current_pos = 0


def generate_cached(model, idx, max_new_tokens, context_size):
    """Greedy; the book's crop past context_size rebuilds the cache (positions move)."""
    model.reset_kv_cache()
    cache_start = cache_end = 0
    for _ in range(max_new_tokens):
        n = idx.size(1)
        start = max(0, n - context_size)
        if cache_end == 0 or start != cache_start:
            model.reset_kv_cache()
            cache_start = cache_end = start
        logits = model(idx[:, cache_end:], use_cache=True)
        cache_end = n
        idx = torch.cat([idx, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
    return idx


def generate_uncached(model, idx, max_new_tokens, context_size):
    for _ in range(max_new_tokens):
        logits = model(idx[:, -context_size:])
        idx = torch.cat([idx, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
    return idx


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(CONFIGS), default="gpt2-124m")
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--prompt-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-cache", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    emb, layers, heads = CONFIGS[args.model]
    cfg = {"vocab_size": 50257, "context_length": 1024, "emb_dim": emb, "n_heads": heads,
           "n_layers": layers, "drop_rate": 0.1, "qkv_bias": True}
    torch.manual_seed(123)
    model = GPTModel(cfg).eval()
    prompt = torch.randint(0, cfg["vocab_size"], (1, args.prompt_tokens))
    run = generate_uncached if args.no_cache else generate_cached
    seconds, out = [], None
    with torch.inference_mode():
        for _ in range(args.reps):
            t0 = time.perf_counter()
            out = run(model, prompt, args.new_tokens, cfg["context_length"])
            seconds.append(time.perf_counter() - t0)
    print(json.dumps({"model": args.model, "new_tokens": args.new_tokens, "threads": args.threads,
                      "cache": not args.no_cache, "torch": torch.__version__, "seconds": seconds,
                      "tokens_per_s": args.new_tokens / min(seconds),
                      "ids_checksum": int(out[0, args.prompt_tokens:].sum())}))


if __name__ == "__main__":
    main()
