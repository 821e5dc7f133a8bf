#!/usr/bin/python3
"""Goldens for tests/test_chapter3.cpp: the chapter-3 classes run by PyTorch (1.13.1, Debian's
python3-torch) with the book's own code, written to tests/golden/ch03_torch113.txt.

For each case: the seed, the module's state_dict right after construction (so the C++ side checks
that its constructors draw the same numbers), the input, the output, and after
loss = (output * loss_weights).sum() the gradients of the input and of every parameter.

Run with /usr/bin/python3 (needs torch only):  /usr/bin/python3 tests/golden/gen_ch03.py
Format (text, one tensor per line, floats as %.9g so float32 round-trips exactly):
    tapegrad-golden ch03 <version>
    case <name> <seed>
    tensor <key> <ndim> <dims...> <values...>
    end
"""
import math
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The book's chapter-4 versions of these, shared with the trainer's goldens and the benchmarks.
from book_gpt import GELU, LayerNorm, MultiHeadAttention  # noqa: E402

VERSION = 1
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ch03_torch113.txt")


# ---- the book's classes, as in pkg/llms_from_scratch/ch03.py ----
class SelfAttention_v1(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        keys = x @ self.W_key
        queries = x @ self.W_query
        values = x @ self.W_value
        attn_scores = queries @ keys.T
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        return attn_weights @ values


class SelfAttention_v2(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)
        attn_scores = queries @ keys.T
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        return attn_weights @ values


class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)
        attn_scores = queries @ keys.transpose(1, 2)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        return attn_weights @ values


class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)])

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)


INPUTS = torch.tensor(
    [[0.43, 0.15, 0.89],
     [0.55, 0.87, 0.66],
     [0.57, 0.85, 0.64],
     [0.22, 0.58, 0.33],
     [0.77, 0.25, 0.10],
     [0.05, 0.80, 0.55]])
BATCH = torch.stack((INPUTS, INPUTS), dim=0)


def fmt(key, t):
    t = t.detach().to(torch.float32).contiguous()
    dims = list(t.shape)
    vals = " ".join("%.9g" % v for v in t.flatten().tolist())
    return "tensor %s %d %s %s" % (key, len(dims), " ".join(map(str, dims)), vals)


def case(lines, name, seed, make, x):
    """manual_seed(seed); m = make(); y = m(x) (the forward draws dropout masks after construction)."""
    torch.manual_seed(seed)
    m = make()
    lines.append("case %s %d" % (name, seed))
    for k, v in m.state_dict().items():
        lines.append(fmt("init." + k, v))
    x = x.clone().requires_grad_(True)
    y = m(x)
    # loss weights: sin(1), sin(2), ... in double, rounded to float32 (stored, not recomputed)
    w = torch.sin(torch.arange(1, y.numel() + 1, dtype=torch.float64)).to(torch.float32).reshape(y.shape)
    (y * w).sum().backward()
    lines.append(fmt("input", x))
    lines.append(fmt("loss_weights", w))
    lines.append(fmt("output", y))
    lines.append(fmt("grad.input", x.grad))
    for k, p in m.named_parameters():
        lines.append(fmt("grad." + k, p.grad))
    lines.append("end")


def main():
    torch.set_num_threads(1)
    lines = ["tapegrad-golden ch03 %d" % VERSION,
             "# generated by tests/golden/gen_ch03.py with torch %s" % torch.__version__]
    case(lines, "SelfAttention_v1", 123, lambda: SelfAttention_v1(3, 2), INPUTS)
    case(lines, "SelfAttention_v2", 789, lambda: SelfAttention_v2(3, 2), INPUTS)
    case(lines, "SelfAttention_v2_bias", 1, lambda: SelfAttention_v2(3, 4, qkv_bias=True), INPUTS)
    case(lines, "CausalAttention", 123, lambda: CausalAttention(3, 2, 6, 0.0), BATCH)
    case(lines, "CausalAttention_dropout", 123, lambda: CausalAttention(3, 2, 6, 0.5), BATCH)
    case(lines, "CausalAttention_short", 7, lambda: CausalAttention(3, 2, 8, 0.0, qkv_bias=True), BATCH)
    case(lines, "MultiHeadAttentionWrapper", 123, lambda: MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2), BATCH)
    case(lines, "MultiHeadAttentionWrapper_dropout", 5,
         lambda: MultiHeadAttentionWrapper(3, 2, 6, 0.5, 3, qkv_bias=True), BATCH)
    case(lines, "MultiHeadAttention", 123, lambda: MultiHeadAttention(3, 2, 6, 0.0, 2), BATCH)
    case(lines, "MultiHeadAttention_dropout", 5,
         lambda: MultiHeadAttention(3, 4, 6, 0.5, 2, qkv_bias=True), BATCH)
    case(lines, "LayerNorm", 0, lambda: LayerNorm(3), BATCH)
    case(lines, "GELU", 0, lambda: GELU(), BATCH)
    case(lines, "Sequential", 0, lambda: nn.Sequential(nn.Linear(3, 4), GELU(), nn.Linear(4, 2)), BATCH)
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", OUT, len(lines), "lines", file=sys.stderr)


if __name__ == "__main__":
    main()
