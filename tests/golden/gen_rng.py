#!/usr/bin/env python3
"""Writes tests/golden/rng_torch113.txt: PyTorch 1.13.1 CPU random draws for tests/test_rng.cpp.

Only needed to regenerate the committed golden file; the C++ test reads that file and needs no
Python. Run with the Debian torch build (AVX2 kernels, no MKL):
    /usr/bin/python3 tests/golden/gen_rng.py

File format (one record per line, '#' starts a comment):
    case <name>                 label for failure messages
    seed <u64>                  torch.manual_seed on the default generator
    gseed <u64>                 torch.Generator().manual_seed for the second generator "g"
    [g.]<op> <args> = <expect>  run <op> (on g if prefixed) and compare bit for bit
    [g.]<op> <args>             run <op>, nothing to compare (save/restore/set_state)
Floats in args are Python float.hex(). Expectations:
    f32 N <bits>...  f64 N <bits>...   IEEE bit patterns in hex
    i64 N <dec>...   u64 N <dec>...    integers
    f32d / f64d / i64d N <fnv1a64> <first min(N,8)> <last min(N,8)>   a digest for long outputs
    bytes N <hex>                      a byte blob
"""
import os
import struct
import sys

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'rng_torch113.txt')
FULL_MAX = 40  # longer outputs are stored as a digest plus their first and last 8 values
U64 = (1 << 64) - 1

lines = []


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & U64
    return h


def expect(kind, vals):
    """Encode an expectation: kind in f32, f64, i64, u64."""
    n = len(vals)
    if kind == 'f32':
        raw = [struct.unpack('<I', struct.pack('<f', v))[0] for v in vals]
        txt = ['%08X' % b for b in raw]
        blob = struct.pack('<%dI' % n, *raw)
    elif kind == 'f64':
        raw = [struct.unpack('<Q', struct.pack('<d', v))[0] for v in vals]
        txt = ['%016X' % b for b in raw]
        blob = struct.pack('<%dQ' % n, *raw)
    else:
        txt = [str(v) for v in vals]
        blob = struct.pack('<%dQ' % n, *[v & U64 for v in vals])
    if n <= FULL_MAX or kind == 'u64':
        return '%s %d %s' % (kind, n, ' '.join(txt))
    k = min(n, 8)
    return '%sd %d %016X %s %s' % (kind, n, fnv1a64(blob), ' '.join(txt[:k]), ' '.join(txt[-k:]))


def bits(t):
    t = t.detach().contiguous().reshape(-1)
    return t.tolist()


def h(x):
    return float(x).hex()


def rec(op, args, kind=None, vals=None, g=False):
    head = ('g.' if g else '') + op + ''.join(' ' + str(a) for a in args)
    lines.append(head if kind is None else head + ' = ' + expect(kind, vals))


class Ctx:
    """Runs torch on the default generator (or on self.g for g.-ops) and records each step."""

    def __init__(self):
        self.g = None
        self.saved = None

    def case(self, name):
        lines.append('case ' + name)

    def seed(self, s):
        torch.manual_seed(s)
        lines.append('seed %d' % (s & U64))

    def gseed(self, s):
        self.g = torch.Generator().manual_seed(s)
        lines.append('gseed %d' % (s & U64))

    def _gen(self, g):
        return self.g if g else None

    def random64(self, n, g=False):
        v = torch.empty(n, dtype=torch.int64).random_(-2 ** 63, None, generator=self._gen(g))
        rec('random64', [n], 'u64', [x & U64 for x in v.tolist()], g)

    def uniform(self, dt, n, a, b, g=False):
        dtype = torch.float32 if dt == 'f32' else torch.float64
        t = torch.empty(n, dtype=dtype).uniform_(a, b, generator=self._gen(g))
        rec('uniform_' + dt, [n, h(a), h(b)], dt, bits(t), g)

    def normal(self, dt, n, mean=0.0, std=1.0, g=False):
        dtype = torch.float32 if dt == 'f32' else torch.float64
        if mean == 0.0 and std == 1.0:
            t = torch.randn(n, dtype=dtype, generator=self._gen(g))  # the randn entry point
        else:
            t = torch.empty(n, dtype=dtype).normal_(mean, std, generator=self._gen(g))
        rec('normal_' + dt, [n, h(mean), h(std)], dt, bits(t), g)

    def normal_noncontig(self, dt, rows, cols, mean=0.0, std=1.0):
        # A transposed view is not contiguous, so torch takes the scalar path (c) for any size;
        # values land in storage order.
        dtype = torch.float32 if dt == 'f32' else torch.float64
        base = torch.empty(rows, cols, dtype=dtype)
        base.t().normal_(mean, std)
        rec('normal_scalar_' + dt, [rows * cols, h(mean), h(std)], dt, bits(base))

    def bernoulli(self, n, p):
        rec('bernoulli', [n, h(p)], 'f32', bits(torch.ones(n).bernoulli_(p)))

    def dropout(self, n, p):
        rec('dropout', [n, h(p)], 'f32', bits(F.dropout(torch.ones(n), p, training=True)))

    def exponential(self, n, lambd):
        rec('exponential_f32', [n, h(lambd)], 'f32', bits(torch.empty(n).exponential_(lambd)))

    def random_i64(self, n):
        rec('random_i64', [n], 'i64', torch.empty(n, dtype=torch.int64).random_().tolist())

    def randint(self, n, low, high):
        rec('randint', [n, low, high], 'i64', torch.randint(low, high, (n,)).tolist())

    def randperm(self, n, g=False):
        rec('randperm', [n], 'i64', torch.randperm(n, generator=self._gen(g)).tolist(), g)

    def multinomial(self, probs, k, replacement):
        t = torch.tensor(probs, dtype=torch.float32)
        if t.dim() == 1:
            t = t.reshape(1, -1)
        out = torch.multinomial(t, k, replacement).reshape(-1).tolist()
        p_hex = ['%08X' % struct.unpack('<I', struct.pack('<f', v))[0] for v in bits(t)]
        rec('multinomial', [t.shape[0], t.shape[1], k, int(replacement)] + p_hex, 'i64', out)

    def loader_epochs(self, n, batch_size, epochs, g=False):
        dl = DataLoader(list(range(n)), batch_size=batch_size, shuffle=True,
                        generator=self._gen(g))
        for _ in range(epochs):
            order = [i for b in dl for i in b.tolist()]
            rec('loader', [n], 'i64', order, g)

    def linear(self, fin, fout, bias=True):
        m = torch.nn.Linear(fin, fout, bias=bias)
        rec('linear_weight', [fin, fout], 'f32', bits(m.weight))
        if bias:
            rec('linear_bias', [fin, fout], 'f32', bits(m.bias))

    def embedding(self, num, dim):
        rec('embedding', [num, dim], 'f32', bits(torch.nn.Embedding(num, dim).weight))

    def get_state(self):
        blob = torch.get_rng_state().numpy().tobytes()
        lines.append('get_state = bytes %d %s' % (len(blob), blob.hex().upper()))

    def set_state_from(self, blob):
        torch.set_rng_state(torch.frombuffer(bytearray(blob), dtype=torch.uint8))
        lines.append('set_state %s' % blob.hex().upper())

    def save(self):
        self.saved = torch.get_rng_state()
        lines.append('save_state')

    def restore(self):
        torch.set_rng_state(self.saved)
        lines.append('restore_state')


def main():
    if not torch.__version__.startswith('1.13'):
        sys.exit('gen_rng.py: needs PyTorch 1.13 (found %s); the goldens pin 1.13 behaviour'
                 % torch.__version__)
    cap = torch.__config__.show().split('CPU capability usage:')[1].split('\n')[0].strip()
    if cap not in ('AVX2', 'AVX512'):
        sys.exit('gen_rng.py: needs the AVX2 kernels (ATen CPU capability %s)' % cap)
    c = Ctx()
    seeds = [0, 1, 42, 123, 789, 2024, 2 ** 32 + 5, -7, 2 ** 64 - 1]

    for s in seeds:
        c.case('words seed=%d' % s)
        c.seed(s)
        c.random64(6)

    for s in seeds[:7]:
        c.case('rand / uniform seed=%d' % s)
        c.seed(s)
        for n in (1, 6, 17):
            c.uniform('f32', n, 0.0, 1.0)
        c.uniform('f64', 5, 0.0, 1.0)
        c.uniform('f32', 30, -0.3, 0.8)
        c.uniform('f64', 12, -2.5, 1.1)
        c.uniform('f32', 12, 2.0, 5.0)
    c.case('rand(1000) f32 and uniform_(-1e-3,1e-3) f32 seed=5')
    c.seed(5)
    c.uniform('f32', 1000, 0.0, 1.0)
    c.uniform('f32', 500, -1e-3, 1e-3)

    for s in seeds[:6]:
        c.case('randn f32 sizes around 16 seed=%d' % s)
        c.seed(s)
        for n in (1, 7, 15, 16, 17, 31, 32, 33):
            c.normal('f32', n)
        c.case('randn f64 seed=%d' % s)
        c.seed(s)
        for n in (5, 16, 21):
            c.normal('f64', n)
    for s in (0, 123):
        c.case('randn(1000) f32 and f64 seed=%d' % s)
        c.seed(s)
        c.normal('f32', 1000)
        c.normal('f64', 100)
    c.case('randn(100000) f32 seed=0')
    c.seed(0)
    c.normal('f32', 100000)
    for s in (0, 123):
        c.case('normal_(mean, std) seed=%d' % s)
        c.seed(s)
        c.normal('f32', 5, 2.0, 3.0)
        c.normal('f32', 40, 2.0, 3.0)
        c.normal('f64', 5, -1.5, 0.3)
        c.normal('f64', 40, -1.5, 0.3)
        c.case('non-contiguous normal_ (scalar path) seed=%d' % s)
        c.seed(s)
        c.normal_noncontig('f32', 5, 4)
        c.normal_noncontig('f64', 3, 7, 0.5, 2.0)
    for s in (0, 123, 789):
        c.case('normal cache carry-over seed=%d' % s)
        c.seed(s)
        c.normal('f32', 7)      # 4 pairs: leaves one value cached
        c.normal('f32', 3)      # starts with the cached value
        c.normal('f32', 16)     # blocked path: ignores the cache
        c.normal('f32', 3)      # leaves one cached again
        c.normal('f64', 1)      # the float cache value, consumed by a double tensor
        c.uniform('f32', 2, 0.0, 1.0)

    for s in (0, 123, 789):
        c.case('bernoulli_ seed=%d' % s)
        c.seed(s)
        for p in (0.5, 0.1, 0.9):
            c.bernoulli(36, p)
    for s in (0, 123, 789, 2024):
        c.case('dropout masks seed=%d' % s)
        c.seed(s)
        for p in (0.1, 0.5, 0.2):
            c.dropout(36, p)
        c.dropout(100, 0.5)
        c.dropout(16, 0.0)   # no draws
        c.dropout(16, 1.0)   # no draws
        c.uniform('f32', 3, 0.0, 1.0)

    for s in (0, 123, 789):
        c.case('random_ / randint seed=%d' % s)
        c.seed(s)
        c.random_i64(20)
        c.randint(30, 0, 10)
        c.randint(10, -3, 2 ** 40)
        c.randint(6, -2 ** 63, 2 ** 63 - 1)
        c.randint(8, 5, 6)
        c.case('randperm seed=%d' % s)
        c.seed(s)
        for n in (0, 1, 2, 5, 33, 5000):
            c.randperm(n)
    c.case('randperm(70000) seed=1')
    c.seed(1)
    c.randperm(70000)

    p4 = [0.1, 0.2, 0.3, 0.4]
    p3x5 = [[0.05, 0.0, 0.5, 0.25, 0.2], [1.0, 2.0, 3.0, 4.0, 5.0], [0.0, 0.0, 1.0, 0.0, 0.0]]
    for s in (0, 1, 123, 789):
        c.case('multinomial seed=%d' % s)
        c.seed(s)
        for _ in range(3):
            c.multinomial(p4, 1, False)
        c.multinomial(p3x5, 1, False)
        c.multinomial(p4, 1, True)
        c.multinomial(p4, 3, False)
        c.multinomial(p3x5[:2], 7, True)
        c.multinomial(p3x5, 2, True)
        c.uniform('f32', 2, 0.0, 1.0)
    c.case('multinomial 4x50 seed=11')
    torch.manual_seed(99)
    probs = (torch.rand(4, 50) ** 3).tolist()
    c.seed(11)
    c.multinomial(probs, 10, False)
    c.multinomial(probs, 20, True)
    c.multinomial(probs, 50, False)
    # k above the nonzero count: the zero keys tie and come out in torch's topk order
    # (nth_element + sort when k*64 > categories, partial_sort otherwise).
    sparse = [0, 0.5, 0, 0.5, 0, 0, 0.2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.1]
    rows3 = [[0.0] * 40 for _ in range(3)]
    for r in rows3:
        r[5] = 1.0
    rows3[1][30] = 2.0
    wide = [0.0] * 256
    wide[17], wide[200] = 0.3, 0.7
    for s in (0, 4):
        c.case('multinomial with tied zero keys seed=%d' % s)
        c.seed(s)
        c.multinomial(sparse, 12, False)
        c.multinomial(rows3, 40, False)
        c.multinomial(wide, 4, False)
        c.multinomial(wide[:200], 3, False)
        c.multinomial(sparse, 1, False)

    for s in (0, 123, 789):
        c.case('DataLoader(shuffle=True) epochs seed=%d' % s)
        c.seed(s)
        c.loader_epochs(10, 5, 3)
        c.loader_epochs(37, 8, 2)
        c.uniform('f32', 3, 0.0, 1.0)
    for s in (0, 77):
        c.case('DataLoader(shuffle=True, generator=g) epochs gseed=%d' % s)
        c.seed(1)
        c.gseed(s)
        c.loader_epochs(10, 4, 3, g=True)
        c.uniform('f32', 3, 0.0, 1.0)
        c.uniform('f32', 3, 0.0, 1.0, g=True)

    for s in (123, 789):
        c.case('nn.Linear seed=%d' % s)
        c.seed(s)
        c.linear(3, 2)
        c.linear(5, 17)
        c.linear(5, 7, bias=False)
        c.linear(1, 4)
        c.uniform('f32', 2, 0.0, 1.0)
    c.case('nn.Linear(768,768) seed=123')
    c.seed(123)
    c.linear(768, 768)
    c.uniform('f32', 2, 0.0, 1.0)
    for s in (123, 789):
        c.case('nn.Embedding seed=%d' % s)
        c.seed(s)
        c.embedding(10, 4)
        c.embedding(3, 4)    # 12 < 16: scalar path, leaves nothing cached (6 pairs)
        c.embedding(3, 5)    # 15: scalar path, leaves one value cached
        c.embedding(1, 3)    # uses the cached value first
        c.embedding(50, 8)

    c.case('exponential_ seed=9')
    c.seed(9)
    c.exponential(50, 1.0)
    c.exponential(10, 2.5)

    c.case('get_rng_state after seed, after randn(7), after 1000 draws; set_rng_state')
    c.seed(123)
    c.get_state()
    c.normal('f32', 7)
    c.get_state()          # the cached normal sits in normal_y
    blob = torch.get_rng_state().numpy().tobytes()
    c.uniform('f32', 1000, 0.0, 1.0)
    c.get_state()
    c.seed(5)
    c.set_state_from(blob)  # torch's blob restores position and cache here
    c.normal('f32', 3)
    c.case('save/restore round trip seed=42')
    c.seed(42)
    c.normal('f32', 5)
    c.save()
    c.normal('f32', 3)
    c.uniform('f32', 700, 0.0, 1.0)
    c.restore()
    c.normal('f32', 3)
    c.uniform('f32', 700, 0.0, 1.0)

    header = ['# PyTorch %s CPU random draws (ATen capability %s) for tests/test_rng.cpp.' % (
        torch.__version__, cap),
        '# Generated by tests/golden/gen_rng.py (format described there); do not edit by hand.',
        'version 1']
    with open(OUT, 'w') as f:
        f.write('\n'.join(header + lines) + '\n')
    print('wrote %s: %d records, %d bytes' % (OUT, len(lines), os.path.getsize(OUT)))


if __name__ == '__main__':
    main()
