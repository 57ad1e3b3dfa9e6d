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

# Conclusions, computed from the runs (summary.md).
def spread(s, p):  # run-to-run spread of the median step time: (max - min) / median
    v = [m["step_time_s"]["median"] for m in runs.get((s, p), [])]
    return (max(v) - min(v)) / statistics.median(v) if len(v) > 1 else float("nan")

notes = []
for s in ("zenflow", "zero-offload"):
    ps = [p for p in policies if (s, p) in runs]
    if not ps:
        continue
    best = min(ps, key=lambda p: med(s, p, "step"))
    worst = max(ps, key=lambda p: med(s, p, "step"))
    spreads = [x for x in (spread(s, p) for p in ps) if x == x]  # NaN: a single run
    noise_txt = (f"the median run-to-run spread of one policy is {100 * statistics.median(spreads):.0f} %, so "
                 "policies closer than that are not told apart by these runs" if spreads
                 else "one run per policy: the run-to-run spread is not measured (REPEATS >= 2)")
    notes.append(f"- {s}: fastest under **{best}** ({med(s, best, 'step'):.2f} ms, stall "
                 f"{med(s, best, 'stall'):.3f}), slowest under **{worst}** ({med(s, worst, 'step'):.2f} ms, "
                 f"stall {med(s, worst, 'stall'):.3f}): {med(s, worst, 'step') / med(s, best, 'step'):.2f}x apart; "
                 f"{noise_txt}.")
both = [p for p in policies if ("zenflow", p) in runs and ("zero-offload", p) in runs]
if both:
    sp = {p: med("zero-offload", p, "step") / med("zenflow", p, "step") for p in both}
    lo, hi = min(sp, key=sp.get), max(sp, key=sp.get)
    wins = sum(1 for p in both if sp[p] > 1)
    notes.append(f"- zenflow is faster than zero-offload under {wins} of {len(both)} policies; the speedup "
                 f"ranges from {sp[lo]:.2f}x ({lo}) to {sp[hi]:.2f}x ({hi}).")
    zst = [med("zenflow", p, "stall") for p in both]
    ost = [med("zero-offload", p, "stall") for p in both]
    notes.append(f"- stall fraction: zenflow {min(zst):.3f}-{max(zst):.3f}, zero-offload {min(ost):.3f}-{max(ost):.3f} "
                 f"across policies.")
    reported = {m["sched"] for ms in runs.values() for m in ms}
    notes.append(f"- every run reported the policy it asked for ({len(reported)} distinct policies in force).")
nrep = max(len(v) for v in runs.values())
with open(f"{out}/summary.md", "w") as fh:
    fh.write("# Scheduling policies: summary\n\n"
             f"Headline spec (experiments/headline/spec-batch8.json), {nrep} run(s) per policy and strategy, "
             "medians of the per-run median step time and stall fraction.\n\n"
             + table + "\n\n## Conclusions\n\n" + "\n".join(notes) + "\n\n"
             "Plots: step_time.png, stall.png (box plots over the runs); every run: results.csv.\n")
print("\n".join(notes))

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
    print(f"wrote {out}/results.csv, {out}/table.md, {out}/summary.md, {out}/step_time.png, {out}/stall.png")
except ImportError:
    print("no matplotlib: no plots")
