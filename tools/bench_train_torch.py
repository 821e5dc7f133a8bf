"""PyTorch side of bench/bench_train: the book's GPTModel trained with AdamW on the same batches.

    python3 tools/bench_train_torch.py VOCAB CONTEXT EMB HEADS LAYERS BATCH STEPS THREADS \
        [ATTENTION [PRECISION [BOOK_GPT_SOURCE]]]

ATTENTION is "book" (the book's MultiHeadAttention, the default) or "sdpa": the same model with
its attention core through F.scaled_dot_product_attention(is_causal=True), what a PyTorch 2 user
would run (dropout on the attention weights becomes SDPA's dropout_p). PRECISION is "fp32" (the
default), "bf16": forward and loss under torch.autocast("cpu", dtype=torch.bfloat16), backward
and AdamW outside it on the float32 parameters, or "bf16-pure": the model converted with
model.to(torch.bfloat16) before the optimizer is built (the book's ch05/10_llm-training-speed,
01_opt_single_gpu.py), so AdamW updates bfloat16 parameters. BOOK_GPT_SOURCE, when given, is the
text of tests/golden/book_gpt.py (a chroot's python cannot see the source tree; bench_train
passes it, and this script with -c).

manual_seed(123), GPTModel(cfg) (bf16-pure: then .to(torch.bfloat16)), AdamW(lr 4e-4,
weight_decay 0.1), then the batches from torch.randint(0, VOCAB, (STEPS + 1, BATCH, CONTEXT + 1))
(tapegrad draws the same ids). Step 0 is a warm-up. Prints "<first loss> <seconds of step 1> ...
<seconds of step STEPS>". (The kernel set PyTorch runs with is read by bench/torch_peer.h's
probe, under the same environment.)
"""
import os
import sys
import time

import torch
import torch.nn.functional as F


def book_gpt():
    """The book's classes: exec'd from the text passed in, or imported from tests/golden."""
    if len(sys.argv) > 11:
        ns = {"__name__": "book_gpt"}
        exec(sys.argv[11], ns)
        return ns
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                    "golden"))
    import book_gpt as m  # noqa: E402
    return vars(m)


def sdpa_forward(self, x):
    """The book's MultiHeadAttention.forward with its core through scaled_dot_product_attention."""
    b, num_tokens, _ = x.shape
    def heads(t):
        return t.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
    q, k, v = heads(self.W_query(x)), heads(self.W_key(x)), heads(self.W_value(x))
    p = self.dropout.p if self.training else 0.0
    ctx = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
    return self.out_proj(ctx.transpose(1, 2).contiguous().view(b, num_tokens, self.d_out))


def main():
    vocab, ctx, emb, heads, layers, batch, steps, threads = map(int, sys.argv[1:9])
    attention = sys.argv[9] if len(sys.argv) > 9 else "book"
    if attention not in ("book", "sdpa"):
        sys.exit(f"bench_train_torch.py: attention must be book or sdpa, got {attention}")
    precision = sys.argv[10] if len(sys.argv) > 10 else "fp32"
    if precision not in ("fp32", "bf16", "bf16-pure"):
        sys.exit("bench_train_torch.py: precision must be fp32, bf16 or bf16-pure, got "
                 + precision)
    book = book_gpt()
    if attention == "sdpa":
        book["MultiHeadAttention"].forward = sdpa_forward
    torch.set_num_threads(threads)
    cfg = {"vocab_size": vocab, "context_length": ctx, "emb_dim": emb, "n_heads": heads,
           "n_layers": layers, "drop_rate": 0.1, "qkv_bias": False}
    torch.manual_seed(123)
    model = book["GPTModel"](cfg)
    if precision == "bf16-pure":
        model = model.to(torch.bfloat16)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0004, weight_decay=0.1)
    ids = torch.randint(0, vocab, (steps + 1, batch, ctx + 1))
    first_loss, seconds = None, []
    for s in range(steps + 1):
        t0 = time.perf_counter()
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = book["calc_loss_batch"](ids[s, :, :-1], ids[s, :, 1:], model)
        loss.backward()
        optimizer.step()
        if first_loss is None:
            first_loss = loss.item()
        else:
            seconds.append(time.perf_counter() - t0)
    print(f"{first_loss:.9g}", " ".join(f"{t:.6f}" for t in seconds))


if __name__ == "__main__":
    main()
