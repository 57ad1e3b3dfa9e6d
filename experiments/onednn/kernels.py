#!/usr/bin/python3
"""Per-kernel task time of the GPT step, fp32 against bf16 (issue 30, item 2), from run.sh's traces.

Usage: kernels.py OUT   (reads OUT/traces/{before-fp32,fp32,before-bf16,bf16}.rN.csv, those present)
Prints a markdown table: for each kernel (a task name without its layer index and tile index; the
per-parameter bf16 rounding, AdamW and master tasks summed over the parameters), its time in ms
per step (steps 5 on, the mean over a trace's steps, then the median over the rounds: on a shared
machine one round's stall would move a mean), one column per run kind; then the linear layers'
matmul tasks, the attention's and all tasks, summed in each round, the median over the rounds. A task's
time is wall-clock from its start to its end on the device worker, tiles that the idle host worker
ran for it included; on a loaded machine it also includes the time other processes took the core.
"""
import collections
import csv
import glob
import re
import statistics
import sys

KINDS = (("before-fp32", "before, fp32"), ("fp32", "after, fp32"), ("before-bf16", "before, bf16"),
         ("bf16", "after, bf16"))
PER_PARAM = ("bf16.grad.", "bf16.param.", "adam.device.", "master.device.")
LINEAR = ("c_attn", "c_proj", "c_fc", "lm_head")


def kernel(name):
    k = re.sub(r"\[\d+\]$", "", name)
    for p in PER_PARAM:
        if k.startswith(p):
            return p.rstrip(".")
    return re.sub(r"\.h\.?\d+\.", ".", k)  # fwd.h0.c_attn -> fwd.c_attn


def per_step(path):
    per, steps = collections.defaultdict(float), set()
    for r in csv.DictReader(open(path)):
        s = int(r["step"])
        if s < 5:
            continue
        steps.add(s)
        per[kernel(r["name"])] += (float(r["end_us"]) - float(r["start_us"])) / 1e3
    return {k: v / len(steps) for k, v in per.items()} if steps else {}


def main():
    out = sys.argv[1]
    cols = collections.OrderedDict()  # title -> the rounds' per-kernel dicts
    for kind, title in KINDS:
        runs = [per_step(p) for p in sorted(glob.glob(f"{out}/traces/{kind}.r*.csv"))]
        runs = [r for r in runs if r]
        if runs:
            cols[f"{title} ({len(runs)})"] = runs
    if not cols:
        sys.exit(f"kernels.py: no traces in {out}/traces")
    med = lambda runs, f: statistics.median(sum(v for k, v in r.items() if f(k)) for r in runs)
    keys = sorted({k for runs in cols.values() for r in runs for k in r},
                  key=lambda k: -max(med(runs, lambda x: x == k) for runs in cols.values()))
    print("## Task time per kernel (ms a step, median over the rounds; the number of rounds in brackets)\n")
    print("| kernel | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for key in keys:
        print(f"| {key} | " + " | ".join(f"{med(runs, lambda x: x == key):.2f}" for runs in cols.values()) + " |")
    groups = (("linear layers' matmuls", lambda k: k.split(".")[-1] in ("dx", "dw") and any(x in k for x in LINEAR)
               or k.startswith("fwd.") and k.split(".", 1)[1] in ("c_attn", "attn.c_proj", "c_fc", "mlp.c_proj", "lm_head")),
              ("attention", lambda k: k.endswith(".attention")),
              ("all tasks", lambda k: True))
    for g, f in groups:
        print(f"| **{g}** | " + " | ".join(f"{med(runs, f):.2f}" for runs in cols.values()) + " |")


if __name__ == "__main__":
    main()
