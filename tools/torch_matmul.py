#!/usr/bin/env python3
"""bench_matmul's PyTorch peer: torch.matmul on the shapes and operand layouts bench_matmul times,
in float32 or bfloat16, at a given thread count; prints one JSON line, {"torch": version,
"gflops": [one per shape]}. bench_matmul passes this file's text with `python -c` (a chroot's
python cannot see the tree), so it also runs by hand:

    python3 tools/torch_matmul.py --dtype bf16 --threads 1 --shapes 1024,1024,1024,0,0

--shapes: M,N,K,transA,transB per shape, separated by ';'. transA: A stored (K, M) and read
transposed; transB: B stored (N, K), as nn.Linear's weight (F.linear's x @ w.T). Each shape is
timed warm: calls repeated to last ~2 ms a sample, best of --reps samples and at least
--min-time seconds. In bfloat16, PyTorch's matmul returns bfloat16 (ours and oneDNN's rows keep
C in float32): the rounding of C is part of PyTorch's time.
"""
import argparse
import json
import time

import torch


def operands(m, n, k, trans_a, trans_b, dtype):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(k, m, generator=g).t() if trans_a else torch.randn(m, k, generator=g)
    b = torch.randn(n, k, generator=g).t() if trans_b else torch.randn(k, n, generator=g)
    return a.to(dtype), b.to(dtype), torch.empty(m, n, dtype=dtype)


def best_seconds(fn, reps, min_time):
    t0 = time.perf_counter()
    fn()
    inner = int(min(max(2e-3 / max(time.perf_counter() - t0, 1e-7), 1), 10000))
    best, total, r = float("inf"), 0.0, 0
    while r < reps or (total < min_time and r < 50):
        s0 = time.perf_counter()
        for _ in range(inner):
            fn()
        t = time.perf_counter() - s0
        best, total, r = min(best, t / inner), total + t, r + 1
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", choices=["f32", "bf16"], required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.3)
    ap.add_argument("--shapes", required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    rates = []
    with torch.no_grad():
        for spec in args.shapes.split(";"):
            m, n, k, ta, tb = (int(v) for v in spec.split(","))
            a, b, c = operands(m, n, k, ta, tb, dtype)
            s = best_seconds(lambda: torch.matmul(a, b, out=c), args.reps, args.min_time)
            rates.append(2.0 * m * n * k / s / 1e9)
    print(json.dumps({"torch": torch.__version__, "gflops": rates}))


if __name__ == "__main__":
    main()
