#!/usr/bin/env python3
"""Goldens for nn::MultiheadAttention and the bonus notebook's MHAPyTorchClass
(tests/test_torch_mha.cpp), written by PyTorch 2.x to tests/golden/torch_mha_torch2.txt in
gen_ch03.py's format.

"MHA.*" cases: torch.nn.MultiheadAttention over its argument table, each built after
torch.manual_seed(seed). A case holds the constructor's and forward's arguments (flags, and the
tensor `dropout`), the state_dict right after construction (init.*), query, key and value (drawn
from their own generator, so the module's draws follow the seed alone), the masks (bool masks
stored as 0/1 with flag <mask>_is_bool 1), attn_output and, when need_weights, the weights, then
after loss = sum(attn_output * loss_weights) [+ sum(weights * loss_weights2)] the gradients of
query, key, value and every parameter. Dropout cases draw their masks in the forward, after the
construction, from the global generator.

"MHAPyTorchClass.*" cases: the notebook's own class (rasbt/LLMs-from-scratch @28c65cdfbc,
ch03/02_bonus_efficient-multihead-attention/mha-implementations.ipynb, section 7, "Using PyTorch's
torch.nn.MultiheadAttention"), read from the .ipynb given on the command line through
notebook_defs.py, as gen_mha_notebook.py reads the others; gen_ch03.case's format (weights, input, output, gradients), with flag need_weights and the
constructor's arguments as flags.

Runs in ../shared/tools/torch2-python's chroot (Debian trixie's PyTorch 2.6), from the repository
root:
    R=$(../shared/tools/torch2-python --root) && mkdir -p $R/tmp/tg-golden &&
    cp tests/golden/{gen_ch03,gen_torch_mha,notebook_defs,book_gpt,book_ch03}.py \
      path/to/mha-implementations.ipynb $R/tmp/tg-golden/ &&
    ../shared/tools/torch2-python /tmp/tg-golden/gen_torch_mha.py \
      /tmp/tg-golden/mha-implementations.ipynb &&
    cp $R/tmp/tg-golden/torch_mha_torch2.txt tests/golden/
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_ch03 import case, fmt  # noqa: E402
from notebook_defs import notebook_definitions  # noqa: E402

VERSION = 1
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_mha_torch2.txt")


# ---- the notebook's class (section 7), from the notebook itself (main sets it) ----
MHAPyTorchClass = None

CTOR_DEFAULTS = dict(dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False, kdim=None,
                     vdim=None, batch_first=False)
FWD_DEFAULTS = dict(need_weights=True, average_attn_weights=True, is_causal=False)


def randn(shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def loss_weights(t, fn):
    """fn(1), fn(2), ... in double, rounded to float32, shaped as t."""
    i = torch.arange(1, t.numel() + 1, dtype=torch.float64)
    return fn(i).to(torch.float32).reshape(t.shape)


def mha_case(lines, name, seed, E, H, L, S, N, ctor=None, fwd=None, kpm=None, attn_mask=None):
    """nn.MultiheadAttention(E, H, **ctor) on query (L, N, E) and key/value (S, N, kdim/vdim)
    (batch first when ctor says so; N == 0: unbatched), forward(**fwd) with the masks."""
    ctor = {**CTOR_DEFAULTS, **(ctor or {})}
    fwd = {**FWD_DEFAULTS, **(fwd or {})}
    torch.manual_seed(seed)
    m = nn.MultiheadAttention(E, H, **ctor)
    lines.append("case %s %d" % (name, seed))
    flags = dict(embed_dim=E, num_heads=H, bias=ctor["bias"], add_bias_kv=ctor["add_bias_kv"],
                 add_zero_attn=ctor["add_zero_attn"], kdim=ctor["kdim"] or 0,
                 vdim=ctor["vdim"] or 0, batch_first=ctor["batch_first"], **fwd)
    for k, v in flags.items():
        lines.append("flag %s %d" % (k, int(v)))
    lines.append(fmt("dropout", torch.tensor([ctor["dropout"]])))
    for k, v in m.state_dict().items():
        lines.append(fmt("init." + k, v))

    def shape(n_tokens, dim):
        if N == 0:
            return (n_tokens, dim)
        return (N, n_tokens, dim) if ctor["batch_first"] else (n_tokens, N, dim)
    q = randn(shape(L, E), seed + 1).requires_grad_(True)
    k = randn(shape(S, ctor["kdim"] or E), seed + 2).requires_grad_(True)
    v = randn(shape(S, ctor["vdim"] or E), seed + 3).requires_grad_(True)
    for key, t in (("query", q), ("key", k), ("value", v)):
        lines.append(fmt(key, t))
    for key, mask in (("key_padding_mask", kpm), ("attn_mask", attn_mask)):
        if mask is not None:
            lines.append(fmt(key, mask.float() if mask.dtype == torch.bool else mask))
            lines.append("flag %s_is_bool %d" % (key, mask.dtype == torch.bool))

    out, weights = m(q, k, v, key_padding_mask=kpm, attn_mask=attn_mask, **fwd)
    w = loss_weights(out, torch.sin)
    loss = (out * w).sum()
    lines.append(fmt("loss_weights", w))
    lines.append(fmt("output", out))
    if weights is not None:
        w2 = loss_weights(weights, torch.cos)
        loss = loss + (weights * w2).sum()
        lines.append(fmt("loss_weights2", w2))
        lines.append(fmt("weights", weights))
    loss.backward()
    for key, t in (("query", q), ("key", k), ("value", v)):
        lines.append(fmt("grad." + key, t.grad))
    for key, p in m.named_parameters():
        lines.append(fmt("grad." + key, p.grad))
    lines.append("end")


def class_case(lines, name, seed, d_in, d_out, num_heads, context_length, x, dropout=0.0,
               qkv_bias=False, need_weights=True):
    """gen_ch03.case on the notebook's class, its arguments written as flags after the case."""
    case(lines, name, seed,
         lambda: MHAPyTorchClass(d_in, d_out, num_heads, context_length, dropout, qkv_bias,
                                 need_weights), x)
    end = lines.pop()
    flags = dict(d_in=d_in, d_out=d_out, num_heads=num_heads, context_length=context_length,
                 qkv_bias=qkv_bias, need_weights=need_weights)
    for k, v in flags.items():
        lines.append("flag %s %d" % (k, int(v)))
    lines.append(fmt("dropout", torch.tensor([dropout])))
    lines.append(end)


def masks(L, S, N, H):
    """Masks that leave every row at least one key (a row of -inf gives NaN weights)."""
    kpm = torch.zeros(N, S, dtype=torch.bool)
    kpm[0, S - 1] = True
    kpm[1, 1] = kpm[1, 3] = True
    banned = torch.ones(L, S, dtype=torch.bool).triu(2)  # True: not allowed
    add2d = torch.linspace(-2, 1, L * S).reshape(L, S)
    add2d[:, 1] = float("-inf")
    add3d = randn((N * H, L, S), 99)
    add3d[:, :, 3] = float("-inf")
    return kpm, banned, add2d, add3d


def main():
    global MHAPyTorchClass
    if len(sys.argv) != 2:
        sys.exit("usage: gen_torch_mha.py mha-implementations.ipynb")
    MHAPyTorchClass = notebook_definitions(sys.argv[1]).MHAPyTorchClass
    torch.set_num_threads(1)
    lines = ["tapegrad-golden torch_mha %d" % VERSION,
             "# generated by tests/golden/gen_torch_mha.py with torch %s" % torch.__version__]
    E, H, L, S, N = 8, 2, 5, 6, 2
    kpm, banned, add2d, add3d = masks(L, S, N, H)
    causal = torch.ones(L, L, dtype=torch.bool).triu(1)
    dims = (E, H, L, S, N)
    mha_case(lines, "MHA.default", 123, *dims)
    mha_case(lines, "MHA.bias_false", 123, *dims, ctor=dict(bias=False))
    mha_case(lines, "MHA.add_bias_kv", 1, *dims, ctor=dict(add_bias_kv=True))
    mha_case(lines, "MHA.add_bias_kv_E16", 2, 16, 4, L, S, N, ctor=dict(add_bias_kv=True))
    mha_case(lines, "MHA.add_zero_attn", 3, *dims, ctor=dict(add_zero_attn=True))
    mha_case(lines, "MHA.kdim_vdim", 4, *dims, ctor=dict(kdim=5, vdim=7))
    mha_case(lines, "MHA.kdim_vdim_no_bias", 4, *dims, ctor=dict(kdim=5, vdim=7, bias=False))
    mha_case(lines, "MHA.batch_first", 5, *dims, ctor=dict(batch_first=True))
    mha_case(lines, "MHA.unbatched", 6, E, H, L, S, 0)
    mha_case(lines, "MHA.key_padding_mask_bool", 7, *dims, kpm=kpm)
    kpm_float = torch.linspace(-1, 0.5, N * S).reshape(N, S)
    kpm_float[1, 4] = float("-inf")
    mha_case(lines, "MHA.key_padding_mask_float", 7, *dims, kpm=kpm_float)
    mha_case(lines, "MHA.attn_mask_bool_2d", 8, *dims, attn_mask=banned)
    mha_case(lines, "MHA.attn_mask_float_2d", 9, *dims, attn_mask=add2d)
    mha_case(lines, "MHA.attn_mask_float_3d", 10, *dims, attn_mask=add3d)
    mha_case(lines, "MHA.masks_bias_kv_zero_attn", 11, *dims, kpm=kpm, attn_mask=banned,
             ctor=dict(add_bias_kv=True, add_zero_attn=True))
    mha_case(lines, "MHA.per_head_weights", 12, *dims, attn_mask=banned,
             fwd=dict(average_attn_weights=False))
    mha_case(lines, "MHA.fused", 13, *dims, fwd=dict(need_weights=False))
    mha_case(lines, "MHA.fused_masks_bias_kv_zero_attn", 14, *dims, kpm=kpm, attn_mask=banned,
             ctor=dict(add_bias_kv=True, add_zero_attn=True, batch_first=True),
             fwd=dict(need_weights=False))
    mha_case(lines, "MHA.fused_attn_mask_float_3d", 15, *dims, attn_mask=add3d,
             fwd=dict(need_weights=False))
    mha_case(lines, "MHA.is_causal_weights", 16, E, H, L, L, N, attn_mask=causal,
             fwd=dict(is_causal=True))
    mha_case(lines, "MHA.is_causal_fused", 16, E, H, L, L, N, attn_mask=causal,
             fwd=dict(is_causal=True, need_weights=False))
    mha_case(lines, "MHA.is_causal_fused_kpm", 17, E, H, L, L, N, attn_mask=causal,
             kpm=kpm[:, :L], fwd=dict(is_causal=True, need_weights=False))
    mha_case(lines, "MHA.dropout_weights", 18, *dims, ctor=dict(dropout=0.5), attn_mask=banned)
    mha_case(lines, "MHA.dropout_fused", 18, *dims, ctor=dict(dropout=0.5), attn_mask=banned,
             fwd=dict(need_weights=False))

    x8, x16 = randn((2, 6, 8), 0), randn((2, 6, 16), 1)
    class_case(lines, "MHAPyTorchClass.default", 123, 8, 8, 2, 6, x8)
    class_case(lines, "MHAPyTorchClass.fused", 123, 8, 8, 2, 6, x8, need_weights=False)
    class_case(lines, "MHAPyTorchClass.qkv_bias", 5, 16, 16, 4, 8, x16, qkv_bias=True)
    class_case(lines, "MHAPyTorchClass.qkv_bias_fused", 5, 16, 16, 4, 8, x16, qkv_bias=True,
               need_weights=False)
    class_case(lines, "MHAPyTorchClass.dropout", 7, 8, 8, 2, 6, x8, dropout=0.5, qkv_bias=True)
    class_case(lines, "MHAPyTorchClass.dropout_fused", 7, 8, 8, 2, 6, x8, dropout=0.5,
               qkv_bias=True, need_weights=False)
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", OUT, len(lines), "lines", file=sys.stderr)


if __name__ == "__main__":
    main()
