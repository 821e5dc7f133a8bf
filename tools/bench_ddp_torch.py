"""PyTorch DDP side of bench/bench_dist: the book's GPTModel in DistributedDataParallel on gloo.

    python3 tools/bench_ddp_torch.py VOCAB CONTEXT EMB HEADS LAYERS BATCH STEPS THREADS RANKS

Starts RANKS processes (torch.multiprocessing, gloo over 127.0.0.1), each with THREADS threads.
Each seeds 123, builds GPTModel(cfg) (the same weights everywhere, as DDP requires), wraps it in
DistributedDataParallel (its default 25 MB gradient buckets, all-reduced while backward runs) and
trains with AdamW(lr 4e-4, weight_decay 0.1) on the batches of
torch.randint(0, VOCAB, (STEPS + 1, BATCH, CONTEXT + 1)), BATCH the global batch: rank r takes
rows [r*BATCH/RANKS, (r+1)*BATCH/RANKS) of each, as a DistributedSampler over contiguous shares
would. Step 0 is a warm-up. Rank 0 prints
    <first global-batch loss> <seconds of step 1> ... <seconds of step STEPS>
    rss <peak RSS of rank 0 in KB> ... <of rank RANKS-1>
A step's time is the slowest rank's (each rank's step ends in a barrier before the clock stops).
"""
import os
import resource
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "golden"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # book_gpt.py copied beside it
from book_gpt import GPTModel, calc_loss_batch  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(rank, args, port):
    vocab, ctx, emb, heads, layers, batch, steps, threads, ranks = args
    torch.set_num_threads(threads)
    os.environ["USE_LIBUV"] = "0"  # Debian's PyTorch 2 has no libuv store; 1.13 never used it
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=ranks)
    cfg = {"vocab_size": vocab, "context_length": ctx, "emb_dim": emb, "n_heads": heads,
           "n_layers": layers, "drop_rate": 0.1, "qkv_bias": False}
    torch.manual_seed(123)
    model = torch.nn.parallel.DistributedDataParallel(GPTModel(cfg))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0004, weight_decay=0.1)
    ids = torch.randint(0, vocab, (steps + 1, batch, ctx + 1))
    share = batch // ranks
    rows = slice(rank * share, (rank + 1) * share)
    first_loss, seconds = None, []
    for s in range(steps + 1):
        dist.barrier()
        t0 = time.perf_counter()
        optimizer.zero_grad()
        loss = calc_loss_batch(ids[s, rows, :-1], ids[s, rows, 1:], model)
        loss.backward()
        optimizer.step()
        dist.barrier()
        if first_loss is None:
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            first_loss = mean.item() / ranks
        else:
            seconds.append(time.perf_counter() - t0)
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss], dtype=torch.int64)
    every = [torch.zeros_like(rss) for _ in range(ranks)]
    dist.all_gather(every, rss)
    if rank == 0:
        print(f"{first_loss:.9g}", " ".join(f"{t:.6f}" for t in seconds))
        print("rss", " ".join(str(int(r.item())) for r in every), flush=True)
    dist.destroy_process_group()


def main():
    args = tuple(map(int, sys.argv[1:10]))
    if len(args) != 9 or args[5] % args[8] != 0:
        sys.exit("usage: bench_ddp_torch.py VOCAB CONTEXT EMB HEADS LAYERS BATCH STEPS THREADS "
                 "RANKS (RANKS dividing BATCH)")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback only, as our TCP row
    mp.spawn(train, args=(args, free_port()), nprocs=args[8], join=True)


if __name__ == "__main__":
    main()
