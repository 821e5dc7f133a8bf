#!/usr/bin/env python3
"""Goldens for flex attention (tests/test_flex_attention.cpp), written by PyTorch 2.6 to
tests/golden/flex_torch2.txt in gen_ch03.py's format:
  * the bonus notebook's MHAPyTorchFlexAttention, built from a seed: its weights, output and the
    gradients of the input and of every parameter for loss = sum(output * loss_weights);
  * torch.nn.attention.flex_attention itself ("F." cases: q, k, v, output and the gradients of
    q, k, v) with a sliding-window mask plus an ALiBi-like score_mod, and with a document mask
    that depends on b (the window, slopes and document ids are written here and in the C++ test).
PyTorch 2.6 runs flex_attention eagerly on the CPU (the notebook guards it with
torch.cuda.is_available(); on the CPU it works, unfused: PyTorch materializes the scores).

The class below is the notebook's cell, copied verbatim from rasbt/LLMs-from-scratch @28c65cdfbc,
ch03/02_bonus_efficient-multihead-attention/mha-implementations.ipynb, section 9 ("Using PyTorch's
FlexAttention"), with its `causal` mask_mod; only the cell's `if ... cuda.is_available()` guard
around the import is dropped.

Runs in ../shared/tools/torch2-python's chroot (Debian trixie's PyTorch 2.6), from the repository
root:
    R=$(../shared/tools/torch2-python --root) && mkdir -p $R/tmp/tg-golden &&
    cp tests/golden/{gen_ch03,gen_mha_flex,book_gpt,book_ch03}.py $R/tmp/tg-golden/ &&
    ../shared/tools/torch2-python /tmp/tg-golden/gen_mha_flex.py &&
    cp $R/tmp/tg-golden/flex_torch2.txt tests/golden/
"""
import os
import sys

import torch
import torch.nn as nn
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_ch03 import backward_weighted, case, fmt  # noqa: E402

VERSION = 1
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flex_torch2.txt")


# ---- the notebook's cell (section 9), verbatim ----
def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


class MHAPyTorchFlexAttention(nn.Module):

    def __init__(self, d_in, d_out, num_heads, context_length, dropout=0.0, qkv_bias=False):
        super().__init__()

        assert d_out % num_heads == 0, "d_out is indivisible by num_heads"

        self.num_heads = num_heads
        self.context_length = context_length
        self.head_dim = d_out // num_heads
        self.d_out = d_out

        self.qkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias)
        self.proj = nn.Linear(d_out, d_out)
        self.dropout = dropout

        # Since slicing the BlockMask is no longer supported in PyTorch 2.10 and newer
        # we will create a new mask in the forward pass with the correct sequence length
        # self.block_mask = create_block_mask(causal, B=None, H=None, Q_LEN=context_length, KV_LEN=context_length)


    def forward(self, x):
        batch_size, num_tokens, embed_dim = x.shape

        # (b, num_tokens, embed_dim) --> (b, num_tokens, 3 * embed_dim)
        qkv = self.qkv(x)

        # (b, num_tokens, 3 * embed_dim) --> (b, num_tokens, 3, num_heads, head_dim)
        qkv = qkv.view(batch_size, num_tokens, 3, self.num_heads, self.head_dim)

        # (b, num_tokens, 3, num_heads, head_dim) --> (3, b, num_heads, num_tokens, head_dim)
        qkv = qkv.permute(2, 0, 3, 1, 4)

        # (3, b, num_heads, num_tokens, head_dim) -> 3 times (b, num_heads, num_tokens, head_dim)
        queries, keys, values = qkv

        # use_dropout = 0. if not self.training else self.dropout

        # Ensure attn_mask is compatible with expected shape and `batch_first=True`
        # No need to manually adjust for num_heads; ensure it's right for the sequence
        # if self.context_length >= num_tokens:
        #     attn_mask = self.block_mask[:num_tokens, :num_tokens]
        # else:
        #     attn_mask = self.block_mask[:self.context_length, :self.context_length]
        #
        #
        # Commented out code lines above since slicing a BlockMask no longer works in PyTorch 3.10
        # Instead, we create a fresh mask each time:
        attn_mask = create_block_mask(causal, B=None, H=None, Q_LEN=num_tokens, KV_LEN=num_tokens, device=x.device)

        context_vec = flex_attention(queries, keys, values, block_mask=attn_mask)

        # Combine heads, where self.d_out = self.num_heads * self.head_dim
        context_vec = context_vec.transpose(1, 2).contiguous().view(batch_size, num_tokens, self.d_out)

        context_vec = self.proj(context_vec)

        return context_vec

# ---- end of the notebook's cell ----


# ---- the functional cases: the same mods are written in tests/test_flex_attention.cpp ----
WINDOW = 3
DOCS = [[0, 0, 0, 1, 1, 2, 2, 2, 2], [0, 1, 1, 1, 1, 1, 2, 2, 3]]


def sliding_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < WINDOW)


def alibi(score, b, h, q_idx, kv_idx):  # slope 2^-(h+1), bias slope * (kv_idx - q_idx)
    return score + torch.exp2(-(h + 1.0)) * (kv_idx - q_idx)


def document(b, h, q_idx, kv_idx):
    docs = torch.tensor(DOCS)
    return (q_idx >= kv_idx) & (docs[b, q_idx] == docs[b, kv_idx])


def fn_case(lines, name, seed, shape, mask_mod, B, H, score_mod=None):
    torch.manual_seed(seed)
    q, k, v = (torch.randn(*shape, requires_grad=True) for _ in range(3))
    bm = create_block_mask(mask_mod, B=B, H=H, Q_LEN=shape[2], KV_LEN=shape[2], device="cpu")
    y = flex_attention(q, k, v, score_mod=score_mod, block_mask=bm)
    w = backward_weighted(y)
    lines.append("case %s %d" % (name, seed))
    for key, t in (("q", q), ("k", k), ("v", v)):
        lines.append(fmt(key, t))
    lines.append(fmt("loss_weights", w))
    lines.append(fmt("output", y))
    for key, t in (("q", q), ("k", k), ("v", v)):
        lines.append(fmt("grad." + key, t.grad))
    lines.append("end")


def main():
    torch.set_num_threads(1)
    lines = ["tapegrad-golden flex %d" % VERSION,
             "# generated by tests/golden/gen_mha_flex.py with torch %s" % torch.__version__]
    x = torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(0))
    case(lines, "MHAPyTorchFlexAttention", 123, lambda: MHAPyTorchFlexAttention(8, 8, 2, 6), x)
    case(lines, "MHAPyTorchFlexAttention_bias", 7,
         lambda: MHAPyTorchFlexAttention(5, 6, 3, 9, 0.5, qkv_bias=True),
         torch.randn(2, 7, 5, generator=torch.Generator().manual_seed(1)))
    fn_case(lines, "F.sliding_window_alibi", 3, (2, 2, 9, 4), sliding_window, None, None, alibi)
    fn_case(lines, "F.document", 4, (2, 2, 9, 4), document, 2, None)
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", OUT, len(lines), "lines", file=sys.stderr)


if __name__ == "__main__":
    main()
