#!/usr/bin/env python3
"""Two structural rules of the tree (STYLE.md; issue 24), checked from the sources alone:

  1. No function longer than 80 lines (signature to closing brace), outside the notebook replay
     train/chapter3.cpp. A function is a brace block opened at namespace or class scope after a
     parenthesised signature; lambdas and local classes count toward their enclosing function.
  2. core's base layer (tensor, autograd, and the generator's header rng.h) includes nothing from
     core/ops/ or core/kernels/. (rng.cpp may: its bulk paths are kernels.)

Usage: tools/check_structure.py [--only lengths|includes] [--max-lines N] [FILE...]
(no files: every tracked .cpp/.h). `make check-format` runs the includes rule.
Prints one line per offence, "path:line: name: N lines" or "path: includes X", and exits 1 if
there is any.
"""
import re
import subprocess
import sys

MAX_LINES = 80
EXEMPT = {"train/chapter3.cpp"}
BASE_LAYER = ["core/tensor.h", "core/tensor.cpp", "core/autograd.h", "core/autograd.cpp",
              "core/rng.h"]
BASE_MAY_NOT_INCLUDE = re.compile(r'#\s*include\s*"(core/(?:ops|kernels)/[^"]*)"')


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
                if last - first + 1 > max_lines:
                    name = re.findall(r"([~\w:]+(?:operator\W+)?)\s*\(", func_open[1])
                    found.append((first, name[0] if name else "?", last - first + 1))
                func_open = None
            if not stack or stack[-1] == "scope":
                stmt_start = i + 1
    return [f"{path}:{line}: {name}: {n} lines (at most {max_lines})" for line, name, n in found]


def base_includes(path, text):
    return [f"{path}: includes {m} (the base layer may not reach into core/ops/ or "
            f"core/kernels/)" for m in BASE_MAY_NOT_INCLUDE.findall(text)]


def main(argv):
    max_lines, files, only = MAX_LINES, [], None
    it = iter(argv)
    for a in it:
        if a == "--max-lines":
            max_lines = int(next(it))
        elif a == "--only":
            only = next(it)
        else:
            files.append(a)
    if not files:
        files = subprocess.run(["git", "ls-files", "*.cpp", "*.h"], capture_output=True,
                               text=True, check=True).stdout.split()
    problems = []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            text = fh.read()
        if f not in EXEMPT and only != "includes":
            problems += long_functions(f, text, max_lines)
        if f in BASE_LAYER and only != "lengths":
            problems += base_includes(f, text)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
