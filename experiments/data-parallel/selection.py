"""Exact selection against the local-sum proxy (selection.sh): selection.csv (one row per run) and
selection.md. Runs are DIR/one.json and DIR/<exact|local-sum>.r<ranks>.s<stage>.json, each with
its .safetensors. Usage: selection.py DIR TESTS_DIR (tests/dp_check.py reads the weights)."""
import csv
import glob
import json
import os
import sys

d, tests = sys.argv[1], sys.argv[2]
sys.path.insert(0, tests)
from dp_check import rel_diffs  # noqa: E402 (the tests' safetensors reader)

one = json.load(open(f"{d}/one.json"))
rows = [{"selection": "one process", "ranks": 1, "stage": 0, "eval_loss": one["final"]["eval_loss"],
         "eval_accuracy": one["final"]["eval_accuracy"], "train_loss": one["final"]["train_loss"],
         "max_rel_l2_vs_one": 0.0, "importance_bytes_per_selection": 0, "selections": one["selection"]["selections"],
         "selection_overlap": one["selection"]["mean_overlap"],
         "gradient_allreduce_bytes_per_step": 0.0, "replicas_identical": True}]
for f in sorted(glob.glob(f"{d}/*.r*.s*.json")):
    sel, r, s = os.path.basename(f)[:-5].rsplit(".", 2)
    m = json.load(open(f))
    dp = m["data_parallel"]
    rows.append({"selection": sel, "ranks": int(r[1:]), "stage": int(s[1:]), "eval_loss": m["final"]["eval_loss"],
                 "eval_accuracy": m["final"]["eval_accuracy"], "train_loss": m["final"]["train_loss"],
                 "max_rel_l2_vs_one": max(rel_diffs(f[:-5] + ".safetensors", f"{d}/one.safetensors").values()),
                 "importance_bytes_per_selection": dp["per_selection"]["importance_bytes"],
                 "selections": dp["selections"], "selection_overlap": m["selection"]["mean_overlap"],
                 "gradient_allreduce_bytes_per_step": dp["allreduce_bytes_per_step"]["gradients"],
                 "replicas_identical": dp["replicas_identical"]})
rows.sort(key=lambda x: (x["ranks"], x["stage"], x["selection"]))
with open(f"{d}/selection.csv", "w", newline="") as fh:
    w = csv.DictWriter(fh, fieldnames=list(rows[0]))
    w.writeheader()
    for x in rows:
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in x.items()})
L = ["# Exact selection against the local-sum proxy: measured", "",
     "| selection | ranks | stage | eval loss | eval accuracy | train loss | weights vs one process (max relative L2) | "
     "importance bytes per selection | selections | overlap of consecutive selections | "
     "gradient all-reduce bytes per step | replicas identical |",
     "|---|---|---|---|---|---|---|---|---|---|---|---|"]
for x in rows:
    L.append(f"| {x['selection']} | {x['ranks']} | {x['stage']} | {x['eval_loss']:.4f} | {x['eval_accuracy']:.4f} | "
             f"{x['train_loss']:.4f} | {x['max_rel_l2_vs_one']:.2g} | {x['importance_bytes_per_selection']} | "
             f"{x['selections']} | {x['selection_overlap']:.4f} | {x['gradient_allreduce_bytes_per_step']:.0f} | {x['replicas_identical']} |")
open(f"{d}/selection.md", "w").write("\n".join(L) + "\n")
print("\n".join(L))
