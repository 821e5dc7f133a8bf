#!/usr/bin/env python3
"""Checks that tools/check_structure.py can fail: planted files that break each rule, in a
scratch tree, must each give their exact line and exit 1; a clean file must pass. Run by
`make check-format` before the checker runs on the real tree."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_structure  # noqa: E402

PLANTED = [
    ("train/planted.cpp", '#include "core/kernels/kernels.h"\n',
     "train/planted.cpp: includes core/kernels/kernels.h: outside core/ the kernels are reached "
     "through core/ops.h"),
    ("dist/planted.cpp", '#include "train/trainer.h"\n',
     "dist/planted.cpp: includes train/trainer.h: dist/ may include only core/, dist/, nn/"),
    ("nn/planted.h", '#include "data/gpt_dataset.h"\n',
     "nn/planted.h: includes data/gpt_dataset.h: nn/ may include only core/, nn/"),
    ("core/planted.cpp", '#include "app/commands.h"\n',
     "core/planted.cpp: includes app/commands.h: core/ may include only core/"),
    ("core/kernels/planted.cpp", '#include "core/tensor.h"\n',
     "core/kernels/planted.cpp: includes core/tensor.h: core/kernels/ is the bottom layer (it "
     "may include only core/kernels/, core/mt19937.h and core/threadpool.h)"),
]
CLEAN = ("app/clean.cpp", '#include "train/trainer.h"\n#include "dist/dist.h"\n')


def run(files):
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = check_structure.main(["--only", "includes"] + files)
    return rc, out.getvalue().splitlines()


def main():
    failures = 0
    with tempfile.TemporaryDirectory() as root:
        cwd = os.getcwd()
        os.chdir(root)
        try:
            for path, body, _ in PLANTED + [CLEAN + (None,)]:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(body)
            for path, _, want in PLANTED:
                rc, lines = run([path])
                if rc != 1 or lines != [want]:
                    print(f"check_structure self-test: {path}: got exit {rc} and {lines}, "
                          f"want exit 1 and [{want!r}]")
                    failures += 1
            rc, lines = run([CLEAN[0]])
            if rc != 0 or lines:
                print(f"check_structure self-test: {CLEAN[0]}: got exit {rc} and {lines}, want 0")
                failures += 1
        finally:
            os.chdir(cwd)
    if failures == 0:
        print(f"check_structure self-test: {len(PLANTED) + 1} planted cases as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
