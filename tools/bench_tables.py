#!/usr/bin/env python3
"""bench/README.md's result tables, made from bench/results/*.json (Python 3 standard library only).

  tools/bench_tables.py            rewrite the tables between the README's marker comments
  tools/bench_tables.py --check    exit 1, naming the table, when the README is not what the
                                   results give (make check-format runs it)
  bench/bench_NAME --json ... | tools/bench_tables.py add bench/results/MACHINE.json \\
      --bench bench_NAME --title "what the run shows" --command "the command line"
                                   record a run (its --json output on stdin) with today's date and
                                   the load average, replacing the run of that bench and title

A results file is one machine's: {"cpu", "caches", "runs": [{"bench", "title", "date", "isa",
"command", "load_average", "notes", "source", "output"}]}, where "output" is the benchmark's own
--json output (or the rows of it a transcribed table had: "source" then says from where). In the
README, `<!-- bench_tables: bench_NAME -->` ... `<!-- /bench_tables -->` holds every machine's runs
of bench_NAME, machines in file-name order.
"""
import argparse
import datetime
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
END = "<!-- /bench_tables -->"


def fmt(value, spec):
    """A number as the benchmark's table prints it; '-' where the run has none."""
    if value is None:
        return "-"
    if spec.endswith("%"):
        return format(100 * value, spec[:-1]) + "%"
    return format(value, spec)


def ratio_to(rows, row, key, base):
    """row[key] over the first row's of the same config that `base` picks (bench_dist's vs 1x2)."""
    ref = next((r for r in rows if r["config"] == row["config"] and base(r)), None)
    return row[key] / ref[key] if ref and row.get(key) and ref.get(key) else None


# Per benchmark: the rows of a run's output, and the columns (title, value of a row, format).
def matmul_rows(out):
    return out


def attention_rows(out):
    return out.get("speedups", [])


def train_configs(out):
    """bench_train --json is {"configs": [...], ...}; a transcribed table kept the list alone."""
    return out["configs"] if isinstance(out, dict) else out


def train_rows(out):
    return [dict(side, config=c["config"]) for c in train_configs(out) for side in c["sides"]]


def train_notes(out):
    """The bound lines a transcribed table printed below its rows."""
    return [f"{c['config']}: {b}" for c in train_configs(out) for b in c.get("bounds", [])]


def notebook_rows(out):
    return out["rows"]


def generate_rows(out):
    return out["rows"]


def dist_rows(out):
    return [dict(r, vs_1x2=ratio_to(out, r, "tokens_per_s", lambda b: b["ranks"] == 1)) for r in out]


def tokenizer_rows(out):
    return out["encode"]


def col(title, key, spec="", text=False):
    return (title, key, spec, text)


TABLES = {
    "bench_matmul": (matmul_rows, [
        col("isa", "isa", text=True), col("dtype", "dtype", text=True), col("thr", "threads", "d"),
        col("shape", "shape", text=True), col("M", "M", "d"), col("N", "N", "d"), col("K", "K", "d"),
        col("GFLOP/s", "gflops", ".1f"), col("OpenBLAS", "openblas_gflops", ".1f"),
        col("oneDNN", "onednn_gflops", ".1f"), col("ratio", "ratio", ".2f"),
        col("probe", "peak_gflops", ".1f"), col("%peak", "peak_fraction", ".1f%")]),
    "bench_attention": (attention_rows, [
        col("pair", "pair", text=True), col("B", "B", "d"), col("T", "T", "d"),
        col("thr", "threads", "d"), col("ours ms", "ours_ms", ".1f"),
        col("peer ms", "peer_ms", ".1f"), col("speedup", "speedup", ".2f")]),
    "bench_attention_notebook": (notebook_rows, [
        col("implementation", "impl", text=True), col("thr", "threads", "d"),
        col("fwd ours", "ours_fwd_ms", ".1f"), col("fwd torch", "torch_fwd_ms", ".1f"),
        col("fwd+bwd ours", "ours_fwd_bwd_ms", ".1f"),
        col("fwd+bwd torch", "torch_fwd_bwd_ms", ".1f"), col("torch/ours", "speedup_fwd_bwd", ".2f"),
        col("RSS MB ours", "ours_peak_rss_mb", ".0f"), col("RSS MB torch", "torch_peak_rss_mb", ".0f"),
        col("extra MB ours", "ours_extra_mb", ".0f"), col("extra MB torch", "torch_extra_mb", ".0f")]),
    "bench_train": (train_rows, [
        col("config", "config", text=True), col("side", "side", text=True),
        col("precision", "precision", text=True), col("tok/s", "tokens_per_s", ".1f"),
        col("RSS MB", "peak_rss_mb", ".0f"), col("loss0", "first_loss", ".6f"),
        col("vs fastest PyTorch", "speedup_vs_fastest_torch", ".2f"),
        col("bound tok/s", "bound_tokens_per_s", ".0f"), col("of bound", "bound_fraction", ".1f%")]),
    "bench_generate": (generate_rows, [
        col("model", "model", text=True), col("tokens", "tokens", "d"), col("thr", "threads", "d"),
        col("cached/s", "cached_tokens_per_s", ".2f"),
        col("uncached/s", "uncached_tokens_per_s", ".2f"),
        col("torch kv/s", "torch_cached_tokens_per_s", ".2f"),
        col("bound/s", "bound_tokens_per_s", ".2f"), col("of bound", "cached_over_bound", ".0f%"),
        col("x torch", "cached_over_torch", ".2f"), col("GB/s", "bandwidth_gb_per_s", ".1f"),
        col("rebuilt", "rebuilt_steps", "d")]),
    "bench_dist": (dist_rows, [
        col("config", "config", text=True), col("setup", "label", text=True),
        col("tok/s", "tokens_per_s", ".0f"), col("vs 1x2", "vs_1x2", ".2f"),
        col("comm ms", "comm_s_per_step", "ms"), col("hidden", "hidden_fraction", ".0f%"),
        col("RSS/rank MB", "peak_rss_mb_max_rank", ".0f"),
        col("AdamW/rank MB", "adamw_mb_per_rank", ".0f"), col("loss0", "first_loss", ".6f")]),
    "bench_tokenizer": (tokenizer_rows, [
        col("text", "text", text=True), col("MB", "mb", ".2f"), col("tokens", "tokens", "d"),
        col("MB/s", "mb_per_s", ".2f"), col("tiktoken MB/s", "tiktoken_mb_per_s", ".2f")]),
}


def cell(row, key, spec, text):
    value = row.get(key)
    if text:
        return "-" if value is None else str(value).replace("|", "\\|")
    if spec == "ms":  # seconds printed as whole milliseconds
        return fmt(None if value is None else 1000 * value, ".0f")
    return fmt(value, spec)


def run_table(bench, machine, run):
    """One run: a line saying where and how it was measured, then its markdown table."""
    rows_of, columns = TABLES[bench]
    isa = f", `{run['isa']}`" if run.get("isa") else ""
    said = [f"**{machine['cpu']}**{isa}, {run['date']}: {run['title']}.", f"`{run['command']}`."]
    if run.get("load_average") is not None:
        said.append(f"Load: {run['load_average']}.")
    if run.get("notes"):
        said.append(run["notes"] + ".")
    if run.get("source"):
        said.append(f"({run['source'][0].upper()}{run['source'][1:]}.)")
    lines = [" ".join(said), "", "| " + " | ".join(c[0] for c in columns) + " |",
             "| " + " | ".join("---" if c[3] else "---:" for c in columns) + " |"]
    for row in rows_of(run["output"]):
        lines.append("| " + " | ".join(cell(row, *c[1:]) for c in columns) + " |")
    notes = train_notes(run["output"]) if bench == "bench_train" else []
    return "\n".join(lines + ([""] + [f"- {n}" for n in notes] if notes else []))


def load_results(directory):
    """The results files, in file-name order."""
    return [json.load(open(p, encoding="utf-8"))
            for p in sorted(glob.glob(os.path.join(directory, "*.json")))]


def block(bench, results):
    parts = [run_table(bench, machine, run)
             for machine in results for run in machine["runs"] if run["bench"] == bench]
    return "\n\n".join(parts) if parts else "(no results recorded yet)"


def render(text, results):
    """The README with every marked block made anew, and the benchmarks whose block changed.
    Raises ValueError on a marker without its end or naming no benchmark."""
    out, stale, rest = [], [], text
    start_tag = "<!-- bench_tables: "
    while start_tag in rest:
        head, _, tail = rest.partition(start_tag)
        bench, sep, tail = tail.partition(" -->")
        if not sep or END not in tail or bench not in TABLES:
            raise ValueError(f"marker for '{bench}' is not '{start_tag}bench_NAME -->' ... {END}")
        old, _, rest = tail.partition(END)
        new = f"\n{block(bench, results)}\n"
        if new != old:
            stale.append(bench)
        out.append(f"{head}{start_tag}{bench} -->{new}{END}")
    return "".join(out) + rest, stale


def write_results(path, machine):
    """One run per block, one row per line: a new run shows as its own lines in a diff."""
    runs = []
    for run in machine["runs"]:
        meta = ",\n".join(f"   {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}"
                          for k, v in run.items() if k != "output")
        out = run["output"]
        rows = out if isinstance(out, list) else None
        body = (json.dumps(out, ensure_ascii=False) if rows is None else "[\n" + ",\n".join(
            "    " + json.dumps(r, ensure_ascii=False) for r in rows) + "\n   ]")
        runs.append("  {\n" + meta + ",\n   \"output\": " + body + "\n  }")
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n \"cpu\": " + json.dumps(machine["cpu"], ensure_ascii=False) +
                ",\n \"caches\": " + json.dumps(machine.get("caches", ""), ensure_ascii=False) +
                ",\n \"runs\": [\n" + ",\n".join(runs) + "\n ]\n}\n")


def first_field(out, key):
    """A field of the output's first object that has it (the CPU every benchmark names)."""
    items = out if isinstance(out, list) else [out]
    return next((i[key] for i in items if isinstance(i, dict) and key in i), "")


def run_load(out):
    """The load the benchmark printed at its start and end, else the load now (after the run)."""
    if isinstance(out, dict) and "load_average_start" in out:
        return f"{out['load_average_start']} at the start, {out.get('load_average_end', '?')} at the end"
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) + " when recorded"


def add(args):
    out = json.load(sys.stdin)
    machine = (json.load(open(args.results, encoding="utf-8")) if os.path.exists(args.results)
               else {"cpu": first_field(out, "cpu"), "caches": first_field(out, "caches"), "runs": []})
    run = {"bench": args.bench, "title": args.title,
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
           "isa": first_field(out, "isa"), "command": args.command,
           "load_average": run_load(out)}
    if args.notes:
        run["notes"] = args.notes
    run["output"] = out
    machine["runs"] = [r for r in machine["runs"]
                       if (r["bench"], r["title"]) != (args.bench, args.title)] + [run]
    write_results(args.results, machine)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--check", action="store_true", help="fail if the README is out of date")
    # Other paths: tools/test_bench_tables.py runs on copies.
    p.add_argument("--readme", default=os.path.join(ROOT, "bench", "README.md"))
    p.add_argument("--results", default=os.path.join(ROOT, "bench", "results"))
    sub = p.add_subparsers(dest="cmd")
    a = sub.add_parser("add", help="record a benchmark's --json output (stdin)")
    a.add_argument("results")
    a.add_argument("--bench", required=True, choices=sorted(TABLES))
    a.add_argument("--title", required=True)
    a.add_argument("--command", required=True)
    a.add_argument("--notes")
    args = p.parse_args()
    if args.cmd == "add":
        return add(args)
    readme = os.path.relpath(args.readme)
    text = open(readme, encoding="utf-8").read()
    try:
        new, stale = render(text, load_results(args.results))
    except ValueError as e:
        sys.exit(f"{readme}: {e}")
    if args.check and stale:
        sys.exit(f"{readme}: the tables of {', '.join(stale)} differ from "
                 f"{os.path.relpath(args.results)}/*.json; run tools/bench_tables.py")
    if not args.check and new != text:
        open(readme, "w", encoding="utf-8").write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
