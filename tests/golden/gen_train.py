"""Goldens for tests/test_train.cpp: a few epochs of the book's train_model_simple on a small GPT
with dropout, in PyTorch 1.13. Developer-only (needs /usr/bin/python3 with torch); the test reads
the committed train_small.txt.

    /usr/bin/python3 tests/golden/gen_train.py

Setup (mirrored by the C++ test): the text is train_text.txt, tokenized as raw bytes (tapegrad's
`bpe:256`: ids 0..255 are the bytes, 256 is <|endoftext|>, so vocab_size 257), split 90/10 by
characters; GPT with context 16, emb 32, 4 heads, 2 layers, drop_rate 0.1, no qkv bias;
manual_seed(123), GPTModel, AdamW(lr 1e-3, weight_decay 0.1); batch 4, 2 epochs, eval_freq 4,
eval_iter 2, an 8-token greedy sample from "The " after each epoch.
"""
import os
import random

import torch

from book_gpt import GPTModel, create_dataloader_v1, split_ids, train_model_simple

HERE = os.path.dirname(os.path.abspath(__file__))
CFG = {"vocab_size": 257, "context_length": 16, "emb_dim": 32, "n_heads": 4, "n_layers": 2,
       "drop_rate": 0.1, "qkv_bias": False}
INIT_PARAMS = ["tok_emb.weight", "pos_emb.weight", "trf_blocks.0.att.W_query.weight",
               "trf_blocks.0.att.out_proj.bias", "trf_blocks.1.ff.layers.0.weight",
               "trf_blocks.1.ff.layers.2.bias", "out_head.weight"]


def make_text():
    """An original, deterministic word salad (about 2 KB), written once to train_text.txt."""
    words = ("the a small river runs past old stone houses where people keep bread and "
             "lamps near every window while children count boats under grey morning light "
             "and nobody hurries because the day is long").split()
    rng = random.Random(7)
    out, line = [], []
    while sum(len(w) + 1 for w in out) < 2200:
        w = rng.choice(words)
        out.append(w.capitalize() if not out or out[-1].endswith(".") else w)
        if rng.random() < 0.12:
            out[-1] += "."
    text = " ".join(out) + ".\n"
    return text


def main():
    path = os.path.join(HERE, "train_text.txt")
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write(make_text())
    text = open(path, encoding="utf-8").read()
    encode = lambda s: list(s.encode("utf-8"))
    train_ids, val_ids = split_ids(text, encode)

    torch.manual_seed(123)
    model = GPTModel(CFG)
    sd = model.state_dict()
    lines = ["# tapegrad test_train goldens: written by tests/golden/gen_train.py, torch " +
             torch.__version__, "config " + " ".join(f"{k}={v}" for k, v in CFG.items())]
    for name in INIT_PARAMS:
        t = sd[name].flatten()
        lines.append(f"init {name} {t.numel()} {t.double().sum().item():.9g} " +
                     " ".join(f"{v:.9g}" for v in t[:4].tolist()))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    train_loader = create_dataloader_v1(train_ids, 4, 16, 16, shuffle=True, drop_last=True)
    val_loader = create_dataloader_v1(val_ids, 4, 16, 16, shuffle=False, drop_last=False)
    step_losses = []

    def on_eval(line, tl, vl, step):
        print(line)
        lines.append(f"eval {step} {tl:.9g} {vl:.9g}")

    def on_sample(epoch, ids):
        lines.append(f"sample {epoch} " + " ".join(map(str, ids)))

    train_model_simple(model, train_loader, val_loader, optimizer, 2, 4, 2, encode("The "),
                       sample_tokens=8, on_eval=on_eval, on_sample=on_sample,
                       step_losses=step_losses)
    for i, l in enumerate(step_losses):
        lines.append(f"step {i} {l:.9g}")
    sd = model.state_dict()
    for name in INIT_PARAMS:
        t = sd[name].flatten()
        lines.append(f"final {name} {t.numel()} {t.double().sum().item():.9g} " +
                     " ".join(f"{v:.9g}" for v in t[:4].tolist()))
    with open(os.path.join(HERE, "train_small.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote train_small.txt ({len(step_losses)} steps)")


if __name__ == "__main__":
    main()
