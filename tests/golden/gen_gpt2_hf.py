#!/usr/bin/python3
"""Fixture for tests/test_gpt2_weights.cpp and `tapegrad generate --gpt2`: the book's GPTModel
with small random weights, written in Hugging Face's GPT-2 layout (the files of
huggingface.co/openai-community/gpt2), plus PyTorch's continuations. Developer-only (needs
/usr/bin/python3 with torch 1.13); the test reads the committed files.

    /usr/bin/python3 tests/golden/gen_gpt2_hf.py

Writes two directories under tests/golden/:
  gpt2_hf/      config.json, model.safetensors (F32, no mask buffers: the current Hub file's
                names), vocab.json + merges.txt, golden.txt
  gpt2_hf_f16/  config.json, model.safetensors (F16, with the h.{i}.attn.bias and
                h.{i}.attn.masked_bias buffers older conversions carry), vocab.json + merges.txt,
                golden.txt (PyTorch run on the F16 weights widened to F32, as the loader does)

Size choice: GPT-2's vocabulary (50257 x n_embd floats) alone would exceed the 2 MB the fixture
may take, so the tokenizer is GPT-2's cut down to its 256 byte tokens and first 743 merges
(ids 256..998 keep GPT-2's ids, <|endoftext|> is 999: vocab_size 1000), in Hugging Face's file
names. The loader takes vocab_size from config.json, so nothing is special-cased for it. The model:
n_embd 64, n_head 4, n_layer 2, n_positions 32 (so 40 new tokens cross the context length and the
book's loop crops the context, which the KV cache must follow).

Weights: manual_seed(123), the book's GPTModel with qkv_bias (its §5.5 NEW_CONFIG), out_head tied
to tok_emb as GPT-2 ties them; LayerNorm scale and shift and every bias drawn at random too, so a
swapped or dropped tensor changes the output. The export is checked by loading the file back with
the book's load_weights_into_gpt (ch05, adapted to Hugging Face's names: c_attn split in three
along its last axis, each transposed) and comparing logits.

golden.txt lines (floats as %.9g):
  tapegrad-golden gpt2_hf 1
  prompt <text>                       (the book's start_context)
  prompt_ids <ids...>
  logits_last <vocab floats>          model(prompt_ids)[0, -1]
  case <name> <seed> <temperature> <top_k> <max_new_tokens> <context_size>
  ids <all ids, prompt included>      the book's generate(), torch.manual_seed(seed) first
"""
import json
import os
import re
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from book_gpt import GPTModel, generate  # noqa: E402

ROOT = os.path.join(HERE, "..", "..")
GPT2_DIR = os.path.join(ROOT, "third_party", "gpt2")
N_MERGES = 743
CFG = {"vocab_size": 256 + N_MERGES + 1, "context_length": 32, "emb_dim": 64, "n_heads": 4,
       "n_layers": 2, "drop_rate": 0.1, "qkv_bias": True}
PROMPT = "Every effort moves you"
# (name, seed, temperature, top_k, max_new_tokens): greedy, the book's §5.5 sampling settings,
# and a plain temperature draw over the whole vocabulary.
CASES = [("greedy", 123, 0.0, None, 40), ("book_5_5", 123, 1.5, 50, 40),
         ("temperature", 7, 0.8, None, 40)]


# --- GPT-2's byte-level BPE, cut down (the encoder of OpenAI's gpt-2/src/encoder.py) ---

def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def cut_down_tokenizer():
    encoder = json.load(open(os.path.join(GPT2_DIR, "encoder.json"), encoding="utf-8"))
    lines = open(os.path.join(GPT2_DIR, "vocab.bpe"), encoding="utf-8").read().split("\n")
    merges = [tuple(l.split()) for l in lines[1:1 + N_MERGES]]
    vocab = {tok: i for tok, i in encoder.items() if i < 256 + N_MERGES}
    for i, (a, b) in enumerate(merges):  # GPT-2's merge i makes token 256 + i
        assert encoder[a + b] == 256 + i and encoder[a] < 256 + i and encoder[b] < 256 + i
    vocab["<|endoftext|>"] = 256 + N_MERGES
    return vocab, merges, lines[0]


def encode(text, vocab, merges):
    """GPT-2's encoding for ASCII text: its pre-tokenizer pattern restricted to ASCII classes
    (\\p{L} -> [A-Za-z], \\p{N} -> [0-9]), then the lowest-rank merge first."""
    assert text.isascii()
    pat = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")
    ranks = {m: i for i, m in enumerate(merges)}
    b2u = bytes_to_unicode()
    ids = []
    for piece in pat.findall(text):
        word = [b2u[b] for b in piece.encode("utf-8")]
        while len(word) > 1:
            pairs = [(ranks.get((word[i], word[i + 1]), 1 << 30), i) for i in range(len(word) - 1)]
            r, i = min(pairs)
            if r == 1 << 30:
                break
            word = word[:i] + [word[i] + word[i + 1]] + word[i + 2:]
        ids += [vocab[w] for w in word]
    return ids


# --- Hugging Face's GPT-2 names, from the book's GPTModel ---

def hf_state(model, with_buffers):
    """The book's parameters under GPT2Model's names; Conv1D weights are (in, out)."""
    sd = {"wte.weight": model.tok_emb.weight, "wpe.weight": model.pos_emb.weight}
    n_pos = CFG["context_length"]
    for i, blk in enumerate(model.trf_blocks):
        p = f"h.{i}."
        att, ff = blk.att, blk.ff.layers
        sd[p + "ln_1.weight"], sd[p + "ln_1.bias"] = blk.norm1.scale, blk.norm1.shift
        if with_buffers:  # torch.tril(ones).view(1, 1, n, n) and the -1e4 fill value
            sd[p + "attn.bias"] = torch.tril(torch.ones(n_pos, n_pos, dtype=torch.uint8)).view(
                1, 1, n_pos, n_pos)
            sd[p + "attn.masked_bias"] = torch.tensor(-1e4)
        sd[p + "attn.c_attn.weight"] = torch.cat(
            [att.W_query.weight.T, att.W_key.weight.T, att.W_value.weight.T], dim=1)
        sd[p + "attn.c_attn.bias"] = torch.cat([att.W_query.bias, att.W_key.bias, att.W_value.bias])
        sd[p + "attn.c_proj.weight"], sd[p + "attn.c_proj.bias"] = att.out_proj.weight.T, att.out_proj.bias
        sd[p + "ln_2.weight"], sd[p + "ln_2.bias"] = blk.norm2.scale, blk.norm2.shift
        sd[p + "mlp.c_fc.weight"], sd[p + "mlp.c_fc.bias"] = ff[0].weight.T, ff[0].bias
        sd[p + "mlp.c_proj.weight"], sd[p + "mlp.c_proj.bias"] = ff[2].weight.T, ff[2].bias
    sd["ln_f.weight"], sd["ln_f.bias"] = model.final_norm.scale, model.final_norm.shift
    return {k: v.detach().contiguous() for k, v in sd.items()}


DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.uint8: "U8"}


def write_safetensors(path, tensors, metadata):
    """safetensors' layout: u64 header length, JSON header (dtype, shape, data_offsets relative to
    the data), padded with spaces to 8 bytes, then the little-endian data in header order."""
    header, blobs, at = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        b = t.numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    np_types = {"F32": np.float32, "F16": np.float16, "U8": np.uint8}
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        a = np.frombuffer(raw[8 + n + b:8 + n + en], dtype=np_types[e["dtype"]])
        out[name] = a.reshape(e["shape"])
    return out


# --- the book's load_weights_into_gpt (ch05 §5.5), on Hugging Face's names ---

def assign(left, right):
    if left.shape != right.shape:
        raise ValueError(f"Shape mismatch. Left: {left.shape}, Right: {right.shape}")
    return torch.nn.Parameter(torch.tensor(right))


def load_weights_into_gpt(gpt, params):
    f32 = {k: v.astype(np.float32) for k, v in params.items()}
    gpt.pos_emb.weight = assign(gpt.pos_emb.weight, f32["wpe.weight"])
    gpt.tok_emb.weight = assign(gpt.tok_emb.weight, f32["wte.weight"])
    for b in range(len(gpt.trf_blocks)):
        p, blk = f"h.{b}.", gpt.trf_blocks[b]
        q_w, k_w, v_w = np.split(f32[p + "attn.c_attn.weight"], 3, axis=-1)
        blk.att.W_query.weight = assign(blk.att.W_query.weight, q_w.T)
        blk.att.W_key.weight = assign(blk.att.W_key.weight, k_w.T)
        blk.att.W_value.weight = assign(blk.att.W_value.weight, v_w.T)
        q_b, k_b, v_b = np.split(f32[p + "attn.c_attn.bias"], 3, axis=-1)
        blk.att.W_query.bias = assign(blk.att.W_query.bias, q_b)
        blk.att.W_key.bias = assign(blk.att.W_key.bias, k_b)
        blk.att.W_value.bias = assign(blk.att.W_value.bias, v_b)
        blk.att.out_proj.weight = assign(blk.att.out_proj.weight, f32[p + "attn.c_proj.weight"].T)
        blk.att.out_proj.bias = assign(blk.att.out_proj.bias, f32[p + "attn.c_proj.bias"])
        blk.ff.layers[0].weight = assign(blk.ff.layers[0].weight, f32[p + "mlp.c_fc.weight"].T)
        blk.ff.layers[0].bias = assign(blk.ff.layers[0].bias, f32[p + "mlp.c_fc.bias"])
        blk.ff.layers[2].weight = assign(blk.ff.layers[2].weight, f32[p + "mlp.c_proj.weight"].T)
        blk.ff.layers[2].bias = assign(blk.ff.layers[2].bias, f32[p + "mlp.c_proj.bias"])
        blk.norm1.scale = assign(blk.norm1.scale, f32[p + "ln_1.weight"])
        blk.norm1.shift = assign(blk.norm1.shift, f32[p + "ln_1.bias"])
        blk.norm2.scale = assign(blk.norm2.scale, f32[p + "ln_2.weight"])
        blk.norm2.shift = assign(blk.norm2.shift, f32[p + "ln_2.bias"])
    gpt.final_norm.scale = assign(gpt.final_norm.scale, f32["ln_f.weight"])
    gpt.final_norm.shift = assign(gpt.final_norm.shift, f32["ln_f.bias"])
    gpt.out_head.weight = assign(gpt.out_head.weight, f32["wte.weight"])


def random_model():
    torch.manual_seed(123)
    model = GPTModel(CFG)
    with torch.no_grad():
        # Embeddings x0.3 and Linear weights x3: at the default scales the tied head only echoes
        # the last token (its embedding dominates the residual stream); so the blocks decide.
        model.tok_emb.weight.mul_(0.3)
        model.pos_emb.weight.mul_(0.3)
        for name, p in model.named_parameters():
            if name.endswith(".weight") and "emb" not in name and "out_head" not in name:
                p.mul_(3.0)
        # LayerNorms away from (1, 0), so a swap of scale and shift shows
        for name, p in model.named_parameters():
            if name.endswith(".scale"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith(".shift"):
                p.copy_(0.2 * torch.randn_like(p))
    model.out_head.weight = model.tok_emb.weight  # GPT-2 ties the output head to wte
    return model.eval()


def golden_lines(model, prompt_ids):
    lines = ["tapegrad-golden gpt2_hf 1", "prompt " + PROMPT,
             "prompt_ids " + " ".join(map(str, prompt_ids))]
    idx = torch.tensor([prompt_ids])
    with torch.no_grad():
        last = model(idx)[0, -1]
    lines.append("logits_last " + " ".join(f"{x:.9g}" for x in last.tolist()))
    # Greedy steps whose two best logits are this close could flip under another summation order.
    ids = idx
    for _ in range(CASES[0][4]):
        with torch.no_grad():
            logits = model(ids[:, -CFG["context_length"]:])[0, -1]
        top = torch.topk(logits, 2).values
        assert top[0] - top[1] > 1e-3, ("near tie", (top[0] - top[1]).item())
        ids = torch.cat([ids, logits.argmax().view(1, 1)], dim=1)
    for name, seed, temperature, top_k, n in CASES:
        torch.manual_seed(seed)
        out = generate(model, idx, n, CFG["context_length"], temperature=temperature, top_k=top_k)
        lines.append(f"case {name} {seed} {temperature} {top_k or 0} {n} {CFG['context_length']}")
        lines.append("ids " + " ".join(map(str, out[0].tolist())))
    return lines


def write_dir(name, model, state, vocab, merges, version_line, prompt_ids):
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function":
              "gelu_new", "n_ctx": CFG["context_length"], "n_embd": CFG["emb_dim"],
              "n_head": CFG["n_heads"], "n_layer": CFG["n_layers"],
              "n_positions": CFG["context_length"], "vocab_size": CFG["vocab_size"],
              "layer_norm_epsilon": 1e-05, "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
              "bos_token_id": 256 + N_MERGES, "eos_token_id": 256 + N_MERGES}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(d, "model.safetensors"), state, {"format": "pt"})
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
        f.write(version_line + "\n" + "".join(f"{a} {b}\n" for a, b in merges))
    # The book's loader on the written file must give the model back.
    check = GPTModel(CFG).eval()
    load_weights_into_gpt(check, read_safetensors(os.path.join(d, "model.safetensors")))
    idx = torch.tensor([prompt_ids])
    with torch.no_grad():
        diff = (check(idx) - model(idx)).abs().max().item()
    assert diff < 1e-5, (name, diff)
    with open(os.path.join(d, "golden.txt"), "w") as f:
        f.write("\n".join(golden_lines(check, prompt_ids)) + "\n")


def main():
    vocab, merges, version_line = cut_down_tokenizer()
    prompt_ids = encode(PROMPT, vocab, merges)
    model = random_model()
    write_dir("gpt2_hf", model, hf_state(model, with_buffers=False), vocab, merges, version_line,
              prompt_ids)
    # The F16 variant: the same weights rounded to half precision; its golden is PyTorch's run
    # on them widened back to float32.
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())
    state = hf_state(model, with_buffers=True)
    state = {k: (v.half() if v.dtype == torch.float32 and v.dim() > 0 else v)
             for k, v in state.items()}
    write_dir("gpt2_hf_f16", model, state, vocab, merges, version_line, prompt_ids)
    print("prompt ids", prompt_ids, "torch", torch.__version__)


if __name__ == "__main__":
    main()
