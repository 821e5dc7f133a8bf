#!/usr/bin/env python3
"""Goldens for nn::MHAEinsum (tests/test_chapter3.cpp): the bonus notebook's MHAEinsum run by
PyTorch 2.x, written to tests/golden/mha_einsum_torch2.txt in gen_ch03.py's format (the weights
right after construction, input, output, and the gradients of the input and of every parameter
for loss = sum(output * loss_weights)).

The class below is the notebook's cell, copied verbatim from rasbt/LLMs-from-scratch @28c65cdfbc,
ch03/02_bonus_efficient-multihead-attention/mha-implementations.ipynb, section 4 ("Multi-head
attention with Einsum"), without the instantiation that follows it in the cell. Its parameters are
drawn by torch.randn, then out_proj's Linear draws, then reset_parameters() redraws the three
weights with kaiming_uniform_(a=sqrt(5)) and the biases with uniform_: C++ must draw the same.

Runs in ../shared/tools/torch2-python's chroot (Debian trixie's PyTorch 2.6), from the repository
root:
    R=$(../shared/tools/torch2-python --root) && mkdir -p $R/tmp/tg-golden &&
    cp tests/golden/{gen_ch03,gen_mha_einsum,book_gpt,book_ch03}.py $R/tmp/tg-golden/ &&
    ../shared/tools/torch2-python /tmp/tg-golden/gen_mha_einsum.py &&
    cp $R/tmp/tg-golden/mha_einsum_torch2.txt tests/golden/
"""
import math  # noqa: F401 (the notebook's cell imports it)
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_ch03 import case  # noqa: E402

VERSION = 1
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mha_einsum_torch2.txt")


# ---- the notebook's cell (section 4), verbatim ----
class MHAEinsum(nn.Module):

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"

        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads

        self.W_query = nn.Parameter(torch.randn(d_in, d_out))
        self.W_key = nn.Parameter(torch.randn(d_in, d_out))
        self.W_value = nn.Parameter(torch.randn(d_in, d_out))

        if qkv_bias:
            self.bias_q = nn.Parameter(torch.zeros(d_out))
            self.bias_k = nn.Parameter(torch.zeros(d_out))
            self.bias_v = nn.Parameter(torch.zeros(d_out))
        else:
            self.register_parameter("bias_q", None)
            self.register_parameter("bias_k", None)
            self.register_parameter("bias_v", None)

        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))
        self.reset_parameters()


    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.W_query, a=math.sqrt(5))
        nn.init.kaiming_uniform_(self.W_key, a=math.sqrt(5))
        nn.init.kaiming_uniform_(self.W_value, a=math.sqrt(5))
        if self.bias_q is not None:
            fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.W_query)
            bound = 1 / math.sqrt(fan_in)
            nn.init.uniform_(self.bias_q, -bound, bound)
            nn.init.uniform_(self.bias_k, -bound, bound)
            nn.init.uniform_(self.bias_v, -bound, bound)

    def forward(self, x):
        b, n, _ = x.shape

        # Calculate Q, K, V using einsum, first perform linear transformations
        Q = torch.einsum("bnd,do->bno", x, self.W_query)
        K = torch.einsum("bnd,do->bno", x, self.W_key)
        V = torch.einsum("bnd,do->bno", x, self.W_value)

        # Add biases if they are used
        if self.bias_q is not None:
            Q += self.bias_q
            K += self.bias_k
            V += self.bias_v

        # Reshape for multi-head attention
        Q = Q.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        K = K.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        V = V.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)

        # Scaled dot-product attention
        scores = torch.einsum("bhnd,bhmd->bhnm", Q, K) / (self.head_dim ** 0.5)

        # Apply mask
        mask = self.mask[:n, :n]
        scores = scores.masked_fill(mask.bool(), -torch.inf)

        # Softmax and dropout
        attn_weights = torch.softmax(scores, dim=-1)
        attn_weights = self.dropout(attn_weights)

        # Aggregate the attended context vectors
        context_vec = torch.einsum("bhnm,bhmd->bhnd", attn_weights, V)

        # Combine heads and project the output
        context_vec = context_vec.transpose(1, 2).reshape(b, n, self.d_out)
        context_vec = self.out_proj(context_vec)

        return context_vec


# ---- end of the notebook's cell ----


def inputs(shape, seed):
    """x from its own generator, so the module's draws follow manual_seed(seed) alone."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def main():
    torch.set_num_threads(1)
    lines = ["tapegrad-golden mha_einsum %d" % VERSION,
             "# generated by tests/golden/gen_mha_einsum.py with torch %s" % torch.__version__]
    x = inputs((2, 6, 8), 0)
    case(lines, "MHAEinsum", 123, lambda: MHAEinsum(8, 8, 6, 0.0, 2), x)
    case(lines, "MHAEinsum_bias", 123, lambda: MHAEinsum(8, 8, 6, 0.0, 2, qkv_bias=True), x)
    case(lines, "MHAEinsum_d_in_ne_d_out", 7, lambda: MHAEinsum(5, 8, 7, 0.0, 4, qkv_bias=True),
         inputs((2, 6, 5), 1))
    case(lines, "MHAEinsum_dropout", 5, lambda: MHAEinsum(8, 8, 6, 0.5, 2, qkv_bias=True), x)
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", OUT, len(lines), "lines", file=sys.stderr)


if __name__ == "__main__":
    main()
