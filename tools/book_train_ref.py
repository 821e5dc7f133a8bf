"""The book's chapter-5 pretraining run in PyTorch, to compare with `tapegrad train` line by line.

    /usr/bin/python3 tools/book_train_ref.py [--text FILE] [--steps N] [--epochs N] [--tapegrad BIN]

Settings are the book's (§5.2 / gpt_train.py): GPT_CONFIG_124M with context 256, dropout 0.1,
manual_seed(123), AdamW(lr 4e-4, weight_decay 0.1), batch 2, eval_freq 5, eval_iter 5, start
context "Every effort moves you", 90/10 split by characters. tiktoken is replaced by
`tapegrad tokenize --encoding gpt2` (checked equal to tiktoken by test_tokenizer). --steps stops
early (the full 10 epochs take a while on CPU). Prints the same lines as `tapegrad train`.
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "golden"))
from book_gpt import GPTModel, create_dataloader_v1, train_model_simple  # noqa: E402
from tapegrad_tokens import gpt2_decode, gpt2_encode  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", default="/work/shared/data/the-verdict.txt")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tapegrad", default=os.path.join(ROOT, "build", "release", "train",
                                                       "tapegrad"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = {"vocab_size": 50257, "context_length": 256, "emb_dim": 768, "n_heads": 12,
           "n_layers": 12, "drop_rate": 0.1, "qkv_bias": False}
    text_data = open(args.text, encoding="utf-8").read()
    torch.manual_seed(123)
    model = GPTModel(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0004, weight_decay=0.1)
    split_idx = int(0.90 * len(text_data))
    train_ids = gpt2_encode(text_data[:split_idx], args.tapegrad)
    val_ids = gpt2_encode(text_data[split_idx:], args.tapegrad)
    train_loader = create_dataloader_v1(train_ids, 2, 256, 256, shuffle=True, drop_last=True)
    val_loader = create_dataloader_v1(val_ids, 2, 256, 256, shuffle=False, drop_last=False)
    start = time.time()
    train_model_simple(
        model, train_loader, val_loader, optimizer, args.epochs, 5, 5,
        gpt2_encode("Every effort moves you", args.tapegrad),
        on_eval=lambda line, *_: print(line, flush=True),
        on_sample=lambda e, ids: print(gpt2_decode(ids, args.tapegrad).replace("\n", " "),
                                       flush=True),
        max_steps=args.steps)
    print(f"# {time.time() - start:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
