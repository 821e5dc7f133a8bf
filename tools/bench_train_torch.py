"""PyTorch side of bench/bench_train: the book's GPTModel trained with AdamW on the same batches.

    /usr/bin/python3 tools/bench_train_torch.py VOCAB CONTEXT EMB HEADS LAYERS BATCH STEPS THREADS

manual_seed(123), GPTModel(cfg), AdamW(lr 4e-4, weight_decay 0.1), then the batches from
torch.randint(0, VOCAB, (STEPS + 1, BATCH, CONTEXT + 1)) (tapegrad draws the same ids). Step 0
is a warm-up. Prints "<first loss> <seconds of step 1> ... <seconds of step STEPS>".
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "golden"))
from book_gpt import GPTModel, calc_loss_batch  # noqa: E402


def main():
    vocab, ctx, emb, heads, layers, batch, steps, threads = map(int, sys.argv[1:9])
    torch.set_num_threads(threads)
    cfg = {"vocab_size": vocab, "context_length": ctx, "emb_dim": emb, "n_heads": heads,
           "n_layers": layers, "drop_rate": 0.1, "qkv_bias": False}
    torch.manual_seed(123)
    model = GPTModel(cfg)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0004, weight_decay=0.1)
    ids = torch.randint(0, vocab, (steps + 1, batch, ctx + 1))
    first_loss, seconds = None, []
    for s in range(steps + 1):
        t0 = time.perf_counter()
        optimizer.zero_grad()
        loss = calc_loss_batch(ids[s, :, :-1], ids[s, :, 1:], model)
        loss.backward()
        optimizer.step()
        if first_loss is None:
            first_loss = loss.item()
        else:
            seconds.append(time.perf_counter() - t0)
    print(f"{first_loss:.9g}", " ".join(f"{t:.6f}" for t in seconds))


if __name__ == "__main__":
    main()
