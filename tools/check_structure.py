#!/usr/bin/env python3
"""Two structural rules of the tree (STYLE.md; issue 24), checked from the sources alone:

  1. No function longer than 80 lines (signature to closing brace), but the notebook replay
     (run_chapter3 in app/chapter3.cpp). A function is a brace block opened at namespace or
     class scope after a parenthesised signature, a TEST_CASE's body included; lambdas and local
     classes count toward their enclosing function.
  2. Layers. core's base (the tensor, tensor_detail and autograd files, and the generator's
     header rng.h) reaches no header in core/ops/ or core/kernels/, directly or through another
     header of the tree. core/kernels/ is the bottom layer: it includes nothing from core outside
     core/kernels/ but mt19937.h and threadpool.h. So rng.cpp may call kernels (its bulk draws
     are integer kernels per ISA) without a cycle: kernels know nothing of the generator.
  3. Folders. Each library folder includes only its own headers and those of the folders below
     it: app -> train -> dist -> nn -> core, with data beside nn (data -> core; train and app
     may use it). Nothing outside core/ reaches core/kernels/ but the tests and benchmarks,
     which time and check the kernels themselves: the libraries go through core/ops.h.

With no FILE, every tracked .cpp/.h; `make check-format` (part of `make test`) runs both rules.
Prints one line per offence, "path:line: name: N lines" or "path: includes X", and exits 1 if
there is any; 2 for a bad command line.
"""
import argparse
import os
import re
import subprocess
import sys

MAX_LINES = 80
# The notebook replay: one function that runs the chapter's cells in the book's order.
EXEMPT = {("app/chapter3.cpp", "run_chapter3")}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)
BASE_LAYER = ["core/tensor.h", "core/tensor.cpp", "core/tensor_detail.h", "core/tensor_detail.cpp",
              "core/autograd.h", "core/autograd.cpp", "core/rng.h"]
ABOVE_BASE = re.compile(r"core/(?:ops|kernels)/")
KERNELS = "core/kernels/"
KERNELS_MAY_INCLUDE = {"core/mt19937.h", "core/threadpool.h"}
# Library folders and the folders each may include (rule 3).
FOLDERS = {
    "core": {"core"},
    "data": {"core", "data"},
    "nn": {"core", "nn"},
    "dist": {"core", "nn", "dist"},
    "train": {"core", "data", "nn", "dist", "train"},
    "app": {"core", "data", "nn", "dist", "train", "app"},
}


def strip(text):
    """The text with comments, string and character literals and preprocessor lines blanked
    out, newlines kept, so that line numbers and braces stay where they were."""
    out, i, n = [], 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#" or (line_start and c in " \t" and
                                       text[i:].lstrip(" \t").startswith("#")):
            j = i  # a directive, with its continuation lines
            while j < n and text[j] != "\n" or (j > 0 and j < n and text[j - 1] == "\\"):
                j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
            continue
        line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
            continue
        m = re.match(r'R"([^(]*)\(', text[i:i + 20])
        if m:
            end = text.find(")" + m.group(1) + '"', i)
            end = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
            continue
        if c in "\"'" and not (c == "'" and i > 0 and text[i - 1].isalnum()):
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
            continue
        if c == "\n":
            line_start = True
        out.append(c)
        i += 1
    return "".join(out)


SCOPE_WORDS = re.compile(r"\b(namespace|class|struct|union|enum)\b")


def long_functions(path, text, max_lines):
    s = strip(text)
    stack = []  # per open brace: "scope", "func" or "other"
    stmt_start = 0  # offset where the current declaration at this level began
    found = []
    func_open = None
    for i, c in enumerate(s):
        if c in ";":
            if not stack or stack[-1] == "scope":
                stmt_start = i + 1
        elif c == "{":
            if stack and stack[-1] in ("func", "other"):
                stack.append("other")
                continue
            head = s[stmt_start:i]
            flat = re.sub(r"\([^()]*\)", "()", head)  # drop (nested) parentheses' contents
            flat = re.sub(r"\([^()]*\)", "()", flat)
            is_func = ("(" in head and not re.search(r"(?<![=!<>])=(?!=)", flat.replace(
                "operator=", "operator")) and not SCOPE_WORDS.search(flat.split("(")[0]))
            if is_func:
                stack.append("func")
                lead = len(head) - len(head.lstrip())
                func_open = (stmt_start + lead, head.strip())
            else:
                stack.append("scope" if SCOPE_WORDS.search(flat) or "extern" in flat else "other")
                if stack[-1] == "scope":
                    stmt_start = i + 1
        elif c == "}":
            kind = stack.pop() if stack else "scope"
            if kind == "func" and func_open is not None:
                first = s.count("\n", 0, func_open[0]) + 1
                last = s.count("\n", 0, i) + 1
                name = re.findall(r"([~\w:]+(?:operator\W+)?)\s*\(", func_open[1])
                name = name[0] if name else "?"
                if last - first + 1 > max_lines and (path, name) not in EXEMPT:
                    found.append((first, name, last - first + 1))
                func_open = None
            if not stack or stack[-1] == "scope":
                stmt_start = i + 1
    return [f"{path}:{line}: {name}: {n} lines (at most {max_lines})" for line, name, n in found]


def quoted_includes(text):
    return INCLUDE.findall(text)


def base_includes(path, text):
    """The ops/ and kernels/ headers a base-layer file reaches, directly or through the tree's
    own headers, each with the chain of headers in between."""
    found, seen, todo = [], {path}, [(text, [])]
    while todo:
        body, chain = todo.pop()
        for inc in quoted_includes(body):
            if ABOVE_BASE.match(inc):
                through = f" (through {' -> '.join(chain)})" if chain else ""
                found.append(f"{path}: includes {inc}{through}: the base layer may not reach "
                             f"into core/ops/ or core/kernels/")
            elif inc not in seen and os.path.isfile(os.path.join(ROOT, inc)):
                seen.add(inc)
                with open(os.path.join(ROOT, inc), encoding="utf-8") as fh:
                    todo.append((fh.read(), chain + [inc]))
    return found


def kernel_includes(path, text):
    return [f"{path}: includes {inc}: core/kernels/ is the bottom layer (it may include only "
            f"core/kernels/, {' and '.join(sorted(KERNELS_MAY_INCLUDE))})"
            for inc in quoted_includes(text)
            if not inc.startswith(KERNELS) and inc not in KERNELS_MAY_INCLUDE]


def folder_includes(path, text):
    """Rule 3 for a file of a library folder: the includes that point up or sideways."""
    mine = path.split("/", 1)[0]
    found = []
    for inc in quoted_includes(text):
        theirs = inc.split("/", 1)[0]
        if theirs in FOLDERS and theirs not in FOLDERS[mine]:
            found.append(f"{path}: includes {inc}: {mine}/ may include only "
                         f"{', '.join(f + '/' for f in sorted(FOLDERS[mine]))}")
        elif mine != "core" and inc.startswith(KERNELS):
            found.append(f"{path}: includes {inc}: outside core/ the kernels are reached "
                         f"through core/ops.h")
    return found


def parse_args(argv):
    p = argparse.ArgumentParser(prog="tools/check_structure.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["lengths", "includes"], help="check one rule only")
    p.add_argument("--max-lines", type=int, default=MAX_LINES, metavar="N",
                   help=f"longest function allowed (default {MAX_LINES})")
    p.add_argument("files", nargs="*", metavar="FILE", help="files to check (default: all)")
    args = p.parse_args(argv)
    if args.max_lines < 1:
        p.error(f"--max-lines expects an integer >= 1, got {args.max_lines}")
    return args


def main(argv):
    args = parse_args(argv)
    files = args.files or subprocess.run(["git", "ls-files", "*.cpp", "*.h"], capture_output=True,
                                         text=True, check=True, cwd=ROOT).stdout.split()
    problems = []
    for f in files:
        try:
            with open(f if args.files else os.path.join(ROOT, f), encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError) as e:
            print(f"tools/check_structure.py: cannot read {f}: {e.strerror or e}", file=sys.stderr)
            return 2
        if args.only != "includes":
            problems += long_functions(f, text, args.max_lines)
        if args.only != "lengths":
            if f in BASE_LAYER:
                problems += base_includes(f, text)
            if f.startswith(KERNELS):
                problems += kernel_includes(f, text)
            if f.split("/", 1)[0] in FOLDERS:
                problems += folder_includes(f, text)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
