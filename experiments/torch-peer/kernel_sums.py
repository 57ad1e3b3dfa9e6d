#!/usr/bin/python3
"""Per-kernel time per step of `zenflow-run --trace-csv` files (flop_rate.py --trace-csv writes
them), side by side: where the GPT's and the Llama's device-adam steps spend their time.

Usage: kernel_sums.py A.csv [B.csv ...] [--top 25]
A kernel is a task name without its digits (layer and tile indices) and, for AdamW and the
copies, without its parameter name. Each column is the kernel's summed task time per step (ms,
over the steps the file holds, the last one left out: it may be cut), then the sum of all tasks
and the median step span (first task of a step to the next step's first task). A task's time
includes the help idle workers give it (runtime/parallel.hpp).
"""
import argparse
import collections
import csv
import re
import statistics


def kernel(name):
    base = re.sub(r"\[\d+\]$", "", name)
    for p in ("adam.device", "master.device", "zero_grad", "round"):
        if base.startswith(p + "."):
            return p
    return re.sub(r"\d+", "N", base)


def sums(path):
    rows = list(csv.DictReader(open(path)))
    steps = sorted({int(r["step"]) for r in rows if int(r["step"]) >= 0})
    steps = steps[:-1] if len(steps) > 1 else steps
    keep = set(steps)
    per = collections.Counter()
    first = {}
    for r in rows:
        s = int(r["step"])
        if s not in keep:
            continue
        per[kernel(r["name"])] += (float(r["end_us"]) - float(r["start_us"])) / 1e3
        first[s] = min(first.get(s, float("inf")), float(r["start_us"]))
    n = len(steps)
    spans = [(first[b] - first[a]) / 1e3 for a, b in zip(steps, steps[1:]) if a in first and b in first]
    return {k: v / n for k, v in per.items()}, statistics.median(spans) if spans else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    res = [sums(p) for p in a.csv]
    keys = sorted({k for r, _ in res for k in r}, key=lambda k: -max(r.get(k, 0) for r, _ in res))
    print("| kernel | " + " | ".join(a.csv) + " |")
    print("|---|" + "---|" * len(a.csv))
    for k in keys[:a.top]:
        print(f"| {k} | " + " | ".join(f"{r.get(k, 0):.2f}" for r, _ in res) + " |")
    print("| all tasks | " + " | ".join(f"{sum(r.values()):.2f}" for r, _ in res) + " |")
    print("| median step span | " + " | ".join(f"{s:.2f}" for _, s in res) + " |")


if __name__ == "__main__":
    main()
