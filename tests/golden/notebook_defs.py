"""The bonus notebook's definitions as a module, the way the book's own tests import them
(llms_from_scratch.utils.import_definitions_from_notebook): of every code cell, only the top-level
imports, `class` and `def` statements run, so the cells' instantiations, %timeit lines and prints
do not. Imports that fail (matplotlib, for the notebook's charts) are skipped with a note on
stderr.

Shared by tests/golden/gen_mha_notebook.py (the goldens, which reads the .ipynb) and
tools/notebook_mha_torch.py (bench_attention --notebook's PyTorch side, which gets the code cells'
text from the benchmark: PyTorch 2's chroot cannot see the source tree, so the benchmark passes
this file's text too, and the script execs it).

Not here: the notebook's markdown, outputs and `if`-guarded statements (cell 30 imports
flex_attention only when CUDA is available; a caller that wants it imports it itself).
"""
import ast
import json
import sys
import types


def code_cells(path):
    """The source of every code cell of the .ipynb at path, in order."""
    with open(path) as f:
        cells = json.load(f)["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def definitions(cells, filename="mha-implementations.ipynb"):
    """A module holding the imports, classes and functions of the code cells' sources."""
    mod = types.ModuleType("mha_implementations")
    for src in cells:
        # IPython magics (%timeit) are not Python; those lines define nothing.
        src = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith(("%", "!")))
        for node in ast.parse(src).body:
            if not isinstance(node, (ast.Import, ast.ImportFrom, ast.ClassDef, ast.FunctionDef)):
                continue
            code = compile(ast.Module(body=[node], type_ignores=[]), filename, "exec")
            try:
                exec(code, mod.__dict__)
            except ImportError as e:
                print("skipped the notebook's", ast.unparse(node), "(%s)" % e, file=sys.stderr)
    return mod


def notebook_definitions(path):
    """definitions() of the notebook file at path."""
    return definitions(code_cells(path), path)
