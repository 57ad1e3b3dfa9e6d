"""Scheduling-policy study on the headline spec: results.csv (every run), table.md, summary.md
(conclusions computed from the runs) and box plots step_time.png, stall.png, staleness.png.

Runs are out/runs/<strategy>.<policy>.prio-<true|false>.stale-<1|2|na>.r<N>.json (run.sh)."""
import collections
import csv
import glob
import json
import os
import statistics
import sys

out = sys.argv[1]
runs = collections.defaultdict(list)  # (strategy, policy, prio, stale) -> [metrics]
for f in sorted(glob.glob(f"{out}/runs/*.json")):
    base = os.path.basename(f)[:-5]
    strategy, rest = base.split(".", 1)
    # the policy name may hold dots? none does; it may hold dashes (zf-deadline, modular-heft-prio)
    policy, prio, stale, rep = rest.split(".")
    m = json.load(open(f))
    m["_repeat"] = rep
    runs[(strategy, policy, prio[5:], stale[6:])].append(m)
if not runs:
    sys.exit(f"no runs in {out}/runs")

def step_ms(m):
    return 1e3 * m["step_time_s"]["median"]

def stall(m):
    return m["stall_fraction"]

def stale_mean(m):
    st = m.get("staleness")
    return st["mean"] if isinstance(st, dict) else float("nan")

def vals(key, f):
    return [f(m) for m in runs.get(key, [])]

def med(key, f):
    v = vals(key, f)
    return statistics.median(v) if v else float("nan")

def rng(key, f):
    v = vals(key, f)
    return (min(v), max(v)) if v else (float("nan"), float("nan"))

policies = sorted({k[1] for k in runs})
# order: by the median zenflow stall at staleness 1 with priorities on
policies.sort(key=lambda p: med(("zenflow", p, "true", "1"), stall))

with open(f"{out}/results.csv", "w", newline="") as fh:
    w = csv.writer(fh)
    w.writerow(["strategy", "policy", "priorities", "max_staleness", "repeat", "median_step_ms", "p90_step_ms",
                "stall_fraction", "staleness_mean_steps", "staleness_max_steps", "sched_reported"])
    for (s, p, pr, st), ms in sorted(runs.items()):
        for m in ms:
            sm = m.get("staleness", {})
            w.writerow([s, p, pr, st, m["_repeat"], f"{step_ms(m):.3f}", f"{1e3 * m['step_time_s']['p90']:.3f}",
                        f"{stall(m):.4f}", sm.get("mean", ""), sm.get("max", ""), m["sched"]])

def cell(key):
    if key not in runs:
        return "-"
    lo, hi = rng(key, stall)
    return f"{med(key, step_ms):.1f} / {med(key, stall):.3f} ({lo:.3f}-{hi:.3f})"

lines = ["| policy | priorities | zenflow s=1: step ms / stall (range) | zenflow s=2: step ms / stall (range) | "
         "zero-offload (no staleness): step ms / stall (range) |",
         "|---|---|---|---|---|"]
for p in policies:
    for pr in ("true", "false"):
        lines.append(f"| {p} | {'on' if pr == 'true' else 'off'} | {cell(('zenflow', p, pr, '1'))} | "
                     f"{cell(('zenflow', p, pr, '2'))} | {cell(('zero-offload', p, pr, 'na'))} |")
table = "\n".join(lines)
with open(f"{out}/table.md", "w") as fh:
    fh.write(table + "\n")
print(table)

# ---- conclusions, computed from the runs
notes = []
nrep = min(len(v) for v in runs.values())
for st in ("1", "2"):
    keys = [k for k in runs if k[0] == "zenflow" and k[3] == st]
    if not keys:
        continue
    best = min(keys, key=lambda k: med(k, stall))
    worst = max(keys, key=lambda k: med(k, stall))
    lws = ("zenflow", "lws", "true", st)
    lo, hi = rng(best, stall)
    txt = (f"- zenflow, max_staleness {st}: lowest median stall under **{best[1]}** with priorities "
           f"{'on' if best[2] == 'true' else 'off'}: {med(best, stall):.3f} (runs {lo:.3f}-{hi:.3f}), "
           f"median step {med(best, step_ms):.1f} ms; highest under {worst[1]} priorities "
           f"{'on' if worst[2] == 'true' else 'off'}: {med(worst, stall):.3f} "
           f"(runs {rng(worst, stall)[0]:.3f}-{rng(worst, stall)[1]:.3f}).")
    if lws in runs and best != lws:
        l_lo, l_hi = rng(lws, stall)
        d = med(lws, stall) - med(best, stall)
        overlap = not (hi < l_lo or l_hi < lo)
        txt += (f" Against lws with priorities ({med(lws, stall):.3f}, runs {l_lo:.3f}-{l_hi:.3f}) that is "
                f"{d:.3f} lower ({100 * d / med(lws, stall) if med(lws, stall) else float('nan'):.0f} %); the run "
                f"ranges {'overlap, so the difference is within the noise of these runs' if overlap else 'do not overlap'}.")
    notes.append(txt)

zd = [k for k in runs if k[1] == "zf-deadline" and k[0] == "zenflow"]
if zd:
    for st in ("1", "2"):
        keys = sorted((k for k in runs if k[0] == "zenflow" and k[3] == st), key=lambda k: med(k, stall))
        for i, k in enumerate(keys):
            if k[1] == "zf-deadline" and k[2] == "true":
                notes.append(f"- zf-deadline (priorities on) ranks {i + 1} of {len(keys)} by median zenflow stall at "
                             f"max_staleness {st}: {med(k, stall):.3f}.")

# priorities on vs off, per policy (zenflow s=1 and zero-offload)
for s, st in (("zenflow", "1"), ("zenflow", "2"), ("zero-offload", "na")):
    diffs = []
    for p in policies:
        on, off = (s, p, "true", st), (s, p, "false", st)
        if on in runs and off in runs:
            diffs.append((p, med(on, stall) - med(off, stall)))
    if diffs:
        lower = [p for p, d in diffs if d < 0]
        notes.append(f"- {s}{'' if st == 'na' else ', max_staleness ' + st}: priorities on give a lower median stall "
                     f"than off under {len(lower)} of {len(diffs)} policies"
                     f"{' (' + ', '.join(lower) + ')' if lower else ''}; on minus off ranges "
                     f"{min(d for _, d in diffs):+.3f} to {max(d for _, d in diffs):+.3f}.")

# policies whose priority range is [0, 0] (eager): priorities on and off are the same schedule, so
# their difference measures the noise of these runs
for s, st in (("zenflow", "1"), ("zenflow", "2"), ("zero-offload", "na")):
    on, off = (s, "eager", "true", st), (s, "eager", "false", st)
    if on in runs and off in runs:
        notes.append(f"- noise floor: eager ignores priorities (its range is [0, 0], so every priority is clamped to "
                     f"0), yet its median stall differs by {abs(med(on, stall) - med(off, stall)):.3f} between "
                     f"'priorities on' and 'off' for {s}{'' if st == 'na' else ' at max_staleness ' + st} "
                     f"({med(on, stall):.3f} vs {med(off, stall):.3f}): differences of that size are noise.")

zo = [k for k in runs if k[0] == "zero-offload"]
zf1 = [k for k in runs if k[0] == "zenflow" and k[3] == "1"]
if zo and zf1:
    zs = [med(k, stall) for k in zo]
    fs = [med(k, stall) for k in zf1]
    notes.append(f"- zero-offload's median stall ranges {min(zs):.3f}-{max(zs):.3f} over policies and priority "
                 f"settings, zenflow's (max_staleness 1) {min(fs):.3f}-{max(fs):.3f}.")
spreads = []
for k in runs:
    v = vals(k, step_ms)
    if len(v) > 1:
        spreads.append((max(v) - min(v)) / statistics.median(v))
if spreads:
    notes.append(f"- run-to-run noise: the median spread (max - min) / median of one configuration's step time is "
                 f"{100 * statistics.median(spreads):.0f} %.")
st2 = [k for k in runs if k[0] == "zenflow"]
if st2:
    for st in ("1", "2"):
        ms = [stale_mean(m) for k in st2 if k[3] == st for m in runs[k]]
        mx = [m["staleness"]["max"] for k in st2 if k[3] == st for m in runs[k]]
        if ms:
            notes.append(f"- measured staleness at max_staleness {st}: mean {min(ms):.2f}-{max(ms):.2f} steps, max "
                         f"{max(mx):.0f} steps over every policy (set by the graph's dependencies, not by the policy).")
reported = {(k[1], m["sched"]) for k, ms in runs.items() for m in ms}
bad = [r for r in reported if r[0] != r[1]]
notes.append(f"- every run reported the policy it asked for: {'yes' if not bad else 'no: ' + str(bad)}.")

with open(f"{out}/summary.md", "w") as fh:
    fh.write("# Scheduling policies: summary\n\n"
             f"experiments/headline/spec.json, {nrep}+ run(s) per configuration; each cell: median step time / "
             "median stall fraction (range over the runs).\n\n"
             + table + "\n\n## Conclusions (computed from the runs)\n\n" + "\n".join(notes) + "\n\n"
             "Plots: step_time.png, stall.png, staleness.png (box plots over the runs); every run: results.csv.\n")
print("\n".join(notes))

# ---- plots
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(0)

panels = [("zenflow", "1"), ("zenflow", "2"), ("zero-offload", "na")]
for name, f, ylabel in (("step_time", step_ms, "median step time (ms)"), ("stall", stall, "stall fraction"),
                        ("staleness", stale_mean, "measured staleness, mean (steps)")):
    pan = panels[:2] if name == "staleness" else panels
    # one row per panel, wide enough for every policy x priorities box
    nbox = sum(1 for p in policies for pr in ("true", "false") if (pan[0][0], p, pr, pan[0][1]) in runs)
    fig, axes = plt.subplots(len(pan), 1, figsize=(max(10, 0.26 * nbox + 2), 4.6 * len(pan)), squeeze=False)
    axes = axes[:, 0]
    for ax, (s, st) in zip(axes, pan):
        data, labels = [], []
        for p in policies:
            for pr in ("true", "false"):
                k = (s, p, pr, st)
                if k in runs:
                    data.append(vals(k, f))
                    labels.append(f"{p} {'P' if pr == 'true' else '-'}")
        ax.boxplot(data, labels=labels)
        ax.set_title(f"{s}" + ("" if st == "na" else f", max_staleness {st}"))
        ax.set_ylabel(ylabel)
        ax.tick_params(axis="x", rotation=75, labelsize=7)
    fig.suptitle(f"headline spec, {nrep}+ runs per box; P: priorities on, -: off")
    fig.tight_layout()
    fig.savefig(f"{out}/{name}.png", dpi=110)
    plt.close(fig)
