#!/usr/bin/python3
"""Per-kernel sums of two `zenflow-run --trace-csv` files side by side (issue 30, item 3).

Usage: breakdown.py DEVICE_ADAM.csv ZENFLOW.csv [--title T]
Prints a markdown table: for each kernel (a task name without its layer index, its tile index
and, for optimizer and crossing tasks, its parameter; AdamW of a 2-D weight and of a 1-D
parameter apart), the side and worker that ran it, its mean time per step in ms under each
strategy and the difference; then each worker's busy time per step (a mean, like the kernels')
and the median step span (the time from one step's first device task to the next step's; a
median, so under load it can be smaller than the mean busy time). Only the steps both files hold
are counted (`--trace-from` chooses the first; the last step is left out: its span is open).
A device task's time includes the help of idle workers (runtime/parallel.hpp): when the host
worker runs the host AdamW it cannot help, and the device's matmuls take longer.
"""
import argparse
import collections
import csv
import re
import statistics

# task names of the optimizer and the crossings: "<prefix>.<parameter>[tile]"
PREFIXES = ("adam.device", "adam.host", "adam.warm", "accumulate", "merge", "result", "select.importance",
            "select.topk", "select.zero_m", "select.zero_v", "select.allreduce", "d2h.resync", "resync",
            "auto.mass", "h2d.m_sel", "h2d.v_sel", "d2h.m_sel", "d2h.v_sel", "master.device", "clip.scale",
            "unscale.grad", "scale.grad")


def load(path):
    return list(csv.DictReader(open(path)))


def matrices(rows):
    """The 2-D weights: the parameters whose gradient zenflow accumulates on the host."""
    return {re.sub(r"\[\d+\]$", "", r["name"])[len("accumulate."):] for r in rows if r["name"].startswith("accumulate.")}


def kernel(name, mats):
    base = re.sub(r"\[\d+\]$", "", name)
    for p in PREFIXES:
        if base.startswith(p + "."):
            param = base[len(p) + 1:]
            if p in ("adam.device", "adam.warm"):
                return f"{p} ({'2-D' if param in mats else '1-D'})"
            return p
    return re.sub(r"\.h\.?\d+\.", ".", base)  # fwd.h0.c_attn -> fwd.c_attn


def summary(rows, steps, mats):
    per = collections.defaultdict(float)
    where = {}
    busy = collections.defaultdict(float)
    starts = collections.defaultdict(lambda: float("inf"))
    for r in rows:
        s = int(r["step"])
        if s not in steps:
            continue
        d = (float(r["end_us"]) - float(r["start_us"])) / 1e3
        k = kernel(r["name"], mats)
        per[k] += d
        where[k] = f"{r['side']} {r['worker']}"
        busy[f"{r['side']} worker {r['worker']}"] += d
        if r["side"] == "device":
            starts[s] = min(starts[s], float(r["start_us"]))
    n = len(steps)
    spans = [(starts[s + 1] - starts[s]) / 1e3 for s in sorted(steps) if s + 1 in starts]
    return ({k: v / n for k, v in per.items()}, where, {k: v / n for k, v in busy.items()},
            statistics.median(spans) if spans else float("nan"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("device_adam")
    ap.add_argument("zenflow")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    da, zf = load(a.device_adam), load(a.zenflow)
    mats = matrices(zf)
    steps = {int(r["step"]) for r in da if int(r["step"]) >= 0} & {int(r["step"]) for r in zf if int(r["step"]) >= 0}
    steps.discard(max(steps))  # its span is open
    (pa, wa, ba, sa), (pz, wz, bz, sz) = summary(da, steps, mats), summary(zf, steps, mats)
    if a.title:
        print(f"### {a.title}\n")
    print(f"Steps {min(steps)}-{max(steps)} ({len(steps)}), ms per step.\n")
    print("| kernel | side, worker | device-adam | zenflow | zenflow - device-adam |")
    print("|---|---|---|---|---|")
    keys = sorted(set(pa) | set(pz), key=lambda k: -abs(pz.get(k, 0) - pa.get(k, 0)))
    for k in keys:
        x, y = pa.get(k, 0.0), pz.get(k, 0.0)
        print(f"| {k} | {wz.get(k, wa.get(k))} | {x:.3f} | {y:.3f} | {y - x:+.3f} |")
    for w in sorted(set(ba) | set(bz)):
        x, y = ba.get(w, 0.0), bz.get(w, 0.0)
        print(f"| **busy, {w}** | | {x:.3f} | {y:.3f} | {y - x:+.3f} |")
    print(f"| **median step span** | | {sa:.3f} | {sz:.3f} | {sz - sa:+.3f} |")
    fb = lambda p, pre: sum(v for k, v in p.items() if k.startswith(pre))
    for pre, what in (("fwd.", "forward"), ("bwd.", "backward")):
        print(f"\n{what} tasks in all: device-adam {fb(pa, pre):.3f} ms, zenflow {fb(pz, pre):.3f} ms a step", end="")
    print()


if __name__ == "__main__":
    main()
