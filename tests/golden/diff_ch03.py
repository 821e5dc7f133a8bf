#!/usr/bin/env python3
"""Diffs `tapegrad chapter3` against the printed outputs of the chapter-3 notebook.

Both texts are cut into cells at their "In [N]:" lines. From each cell we take every printed
tensor (from the start of its line, so "Attention weights: tensor([...])" keeps its label, through
the closing parenthesis, grad_fn included), every line holding a torch.Size, and "label: <float>"
lines (Python floats such as "Row 2 sum: 1.0"). Code in the notebook is not picked up: its tensors
are spelled torch.tensor(...). Items are compared in order, per cell, as exact text.

usage: tests/golden/diff_ch03.py [NOTEBOOK_TXT] [TAPEGRAD_BINARY]
  defaults: /work/shared/seeds/ch03-notebook.txt and build/release/app/tapegrad
  (a notebook file named multihead-attention* is replayed with `chapter3 --notebook mha`)
Exit status 0 when every item matches. Needs only the Python standard library.
"""
import difflib
import os
import re
import subprocess
import sys

CELL = re.compile(r"^In \[(\d+)\]:\s*$")
SIZE = re.compile(r"torch\.Size\(\[[0-9, ]*\]\)")
FLOAT_LINE = re.compile(r"^[A-Za-z][A-Za-z0-9 ._]*: -?\d+\.\d*(e-?\d+)?$")
TENSOR_START = re.compile(r"(?<![\w.])tensor\(")


def cells(text):
    out, cur, lines = {}, None, []
    for line in text.splitlines():
        m = CELL.match(line)
        if m:
            if cur is not None:
                out[cur] = lines
            cur, lines = int(m.group(1)), []
        elif cur is not None:
            lines.append(line)
    if cur is not None:
        out[cur] = lines
    return out


def items(lines):
    found, i = [], 0
    while i < len(lines):
        line = lines[i]
        m = TENSOR_START.search(line)
        if m:
            # from the line start through the balanced closing parenthesis
            depth, j, buf, col = 0, i, [], m.start()
            done = False
            while j < len(lines) and not done:
                seg = lines[j]
                start = col if j == i else 0
                for k in range(start, len(seg)):
                    if seg[k] == "(":
                        depth += 1
                    elif seg[k] == ")":
                        depth -= 1
                        if depth == 0:
                            buf.append(seg[: k + 1])
                            done = True
                            break
                if not done:
                    buf.append(seg)
                    j += 1
            found.append("\n".join(buf))
            i = j + 1
            continue
        if SIZE.search(line) or FLOAT_LINE.match(line):
            found.append(line.rstrip())
        i += 1
    return found


def main():
    nb_path = sys.argv[1] if len(sys.argv) > 1 else "/work/shared/seeds/ch03-notebook.txt"
    exe = sys.argv[2] if len(sys.argv) > 2 else "build/release/app/tapegrad"
    with open(nb_path, encoding="utf-8") as f:
        notebook = cells(f.read())
    args = [exe, "chapter3"]
    if "multihead" in os.path.basename(nb_path):  # multihead-attention.ipynb's replay
        args += ["--notebook", "mha"]
    ours = cells(subprocess.run(args, check=True, capture_output=True, text=True).stdout)
    total = matched = 0
    for n in sorted(notebook):
        want = items(notebook[n])
        got = items(ours.get(n, []))
        for k in range(max(len(want), len(got))):
            w = want[k] if k < len(want) else None
            g = got[k] if k < len(got) else None
            if w is None:
                print("In [%d] item %d: extra output\n%s\n" % (n, k + 1, g))
                continue
            total += 1
            if w == g:
                matched += 1
                continue
            print("In [%d] item %d differs:" % (n, k + 1))
            diff = difflib.unified_diff((w or "").splitlines(), (g or "<missing>").splitlines(),
                                        "notebook", "tapegrad", lineterm="", n=0)
            print("\n".join(list(diff)[2:]) + "\n")
    print("%d of %d printed items match (tensors, torch.Size lines, Python floats)"
          % (matched, total))
    return 0 if matched == total else 1


if __name__ == "__main__":
    sys.exit(main())
