"""Box plots and a table of step time and stall fraction per StarPU policy and strategy."""
import collections
import csv
import glob
import json
import os
import statistics
import sys

out = sys.argv[1]
runs = collections.defaultdict(list)  # (strategy, policy) -> [metrics]
for f in sorted(glob.glob(f"{out}/runs/*.json")):
    strategy, policy, _ = os.path.basename(f)[:-5].split(".")
    runs[(strategy, policy)].append(json.load(open(f)))
policies = sorted({p for _, p in runs}, key=lambda p: statistics.median(
    m["step_time_s"]["median"] for m in runs.get(("zenflow", p), runs[next(k for k in runs if k[1] == p)])))
with open(f"{out}/results.csv", "w", newline="") as fh:
    w = csv.writer(fh)
    w.writerow(["strategy", "policy", "run", "median_step_ms", "p90_step_ms", "stall_fraction", "sched_reported"])
    for (s, p), ms in sorted(runs.items()):
        for i, m in enumerate(ms):
            w.writerow([s, p, i, 1e3 * m["step_time_s"]["median"], 1e3 * m["step_time_s"]["p90"],
                        m["stall_fraction"], m["sched"]])

def med(s, p, key):
    v = [m["step_time_s"]["median"] * 1e3 if key == "step" else m["stall_fraction"] for m in runs.get((s, p), [])]
    return statistics.median(v) if v else float("nan")

lines = ["| policy | zenflow step (ms) | zenflow stall | zero-offload step (ms) | zero-offload stall | speedup |",
         "|---|---|---|---|---|---|"]
for p in policies:
    zs, zo = med("zenflow", p, "step"), med("zero-offload", p, "step")
    lines.append(f"| {p} | {zs:.2f} | {med('zenflow', p, 'stall'):.3f} | {zo:.2f} | "
                 f"{med('zero-offload', p, 'stall'):.3f} | {zo / zs:.2f}x |")
table = "\n".join(lines)
print(table)
with open(f"{out}/table.md", "w") as fh:
    fh.write(table + "\n")

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for key, title, fname in [("step", "median step time (ms)", "step_time.png"),
                              ("stall", "stall fraction", "stall.png")]:
        fig, ax = plt.subplots(figsize=(13, 4.5))
        data, labels, colors = [], [], []
        for p in policies:
            for s, c in [("zenflow", "#4477aa"), ("zero-offload", "#cc6677")]:
                v = [m["step_time_s"]["median"] * 1e3 if key == "step" else m["stall_fraction"]
                     for m in runs.get((s, p), [])]
                data.append(v)
                labels.append(p)
                colors.append(c)
        bp = ax.boxplot(data, patch_artist=True, widths=0.6)
        for patch, c in zip(bp["boxes"], colors):
            patch.set_facecolor(c)
        ax.set_xticks(range(1, len(labels) + 1))
        ax.set_xticklabels(labels, rotation=60, fontsize=8)
        ax.set_title(f"{title} per StarPU policy (blue: zenflow, red: zero-offload)")
        fig.tight_layout()
        fig.savefig(f"{out}/{fname}", dpi=110)
    print(f"wrote {out}/results.csv, {out}/table.md, {out}/step_time.png, {out}/stall.png")
except ImportError:
    print("no matplotlib: no plots")
