#!/usr/bin/env python3
"""Checks that tools/bench_tables.py --check can fail: in a scratch folder, a README made from a
results file passes, and a changed result, a hand-edited table cell and a run recorded with
`add` each make it fail (exit 1, naming the benchmark) until the tables are written again. Run
by `make check-format` before the check of the real bench/README.md."""
import json
import os
import subprocess
import sys
import tempfile

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_tables.py")
README = """# Benchmarks

<!-- bench_tables: bench_dist -->
<!-- /bench_tables -->
"""
# bench_dist --json's rows, cut to the fields its table shows.
ROWS = [{"config": "tiny", "setup": "one", "label": "ours 1 process x 2 threads", "cpu": "CPU X",
         "isa": "avx2", "ranks": 1, "tokens_per_s": 1000.0, "comm_s_per_step": None,
         "hidden_fraction": None, "peak_rss_mb_max_rank": 400.0, "adamw_mb_per_rank": 100.0,
         "first_loss": 10.9},
        {"config": "tiny", "setup": "shm", "label": "ours 2 ranks x 1 thread", "cpu": "CPU X",
         "isa": "avx2", "ranks": 2, "tokens_per_s": 900.0, "comm_s_per_step": 0.05,
         "hidden_fraction": 0.2, "peak_rss_mb_max_rank": 300.0, "adamw_mb_per_rank": 50.0,
         "first_loss": 10.9}]


def tool(args, stdin=None):
    r = subprocess.run([sys.executable, TOOL] + args, input=stdin, capture_output=True, text=True)
    return r.returncode, r.stderr.strip()


def main():
    failures = []

    def expect(what, got, want_rc, want_text=""):
        rc, err = got
        if rc != want_rc or want_text not in err:
            failures.append(f"{what}: got exit {rc} ({err!r}), want {want_rc} with {want_text!r}")

    with tempfile.TemporaryDirectory() as d:
        readme, results = os.path.join(d, "README.md"), os.path.join(d, "results")
        os.mkdir(results)
        machine = os.path.join(results, "cpu-x.json")
        paths = ["--readme", readme, "--results", results]
        with open(readme, "w", encoding="utf-8") as f:
            f.write(README)
        add = paths + ["add", machine, "--bench", "bench_dist", "--title", "t", "--command", "c"]
        expect("add a run", tool(add, json.dumps(ROWS)), 0)
        expect("an empty block", tool(paths + ["--check"]), 1, "bench_dist differ")
        expect("write", tool(paths), 0)
        expect("fresh", tool(paths + ["--check"]), 0)
        text = open(readme, encoding="utf-8").read()
        if "| tiny | ours 2 ranks x 1 thread | 900 | 0.90 | 50 | 20% | 300 | 50 | 10.900000 |" \
                not in text:
            failures.append("the table lacks the row the results give:\n" + text)
        with open(readme, "w", encoding="utf-8") as f:
            f.write(text.replace("| 900 |", "| 950 |"))
        expect("a hand-edited cell", tool(paths + ["--check"]), 1, "bench_dist differ")
        expect("write again", tool(paths), 0)
        data = json.load(open(machine, encoding="utf-8"))
        data["runs"][0]["output"][1]["tokens_per_s"] = 910.0
        with open(machine, "w", encoding="utf-8") as f:
            json.dump(data, f)
        expect("a changed result", tool(paths + ["--check"]), 1, "bench_dist differ")
        expect("write after the change", tool(paths), 0)
        expect("a second title", tool(add[:-4] + ["--title", "u", "--command", "c"],
                                      json.dumps(ROWS)), 0)
        expect("a run added", tool(paths + ["--check"]), 1, "bench_dist differ")
        with open(readme, "w", encoding="utf-8") as f:
            f.write(README.replace("<!-- /bench_tables -->\n", ""))
        expect("an unclosed marker", tool(paths + ["--check"]), 1, "is not")
    for f in failures:
        print("bench_tables self-test: " + f)
    if not failures:
        print("bench_tables self-test: stale tables, edited cells and new runs are caught")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
