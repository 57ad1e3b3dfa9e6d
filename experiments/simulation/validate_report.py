#!/usr/bin/env python3
"""Predicted against measured (validate.sh): per (spec, strategy, policy) the measured step time
(the median over the rounds of each run's step_time_s.median, with the rounds' range) and stall
fraction (the median over the rounds) against the simulated run's; the median over all points of
|predicted / measured - 1|, the points within 15 % (issue 28), and the plot.
Writes OUT/validation.md, OUT/validation.csv, OUT/validation.png.
Usage: validate_report.py OUT"""
import glob
import json
import os
import re
import statistics
import sys
from collections import defaultdict

TOL = 0.15  # issue 28: within 15 %


def load(path):
    with open(path) as f:
        return json.load(f)


def main(out):
    real = defaultdict(list)
    for p in glob.glob(os.path.join(out, "real", "*.r*.json")):
        m = re.fullmatch(r"([^.]+)\.([^.]+)\.([^.]+)\.r(\d+)\.json", os.path.basename(p))
        if m:
            real[m.groups()[:3]].append(load(p))
    rows = []
    for key in sorted(real):
        sp = os.path.join(out, "sim", ".".join(key) + ".json")
        if not os.path.exists(sp):
            print(f"validate_report: no simulated run {sp}", file=sys.stderr)
            sys.exit(2)
        sim = load(sp)
        steps = [r["step_time_s"]["median"] * 1e3 for r in real[key]]
        stalls = [r["stall_fraction"] for r in real[key]]
        rows.append(dict(spec=key[0], strategy=key[1], sched=key[2], rounds=len(steps),
                         meas_ms=statistics.median(steps), meas_min=min(steps), meas_max=max(steps),
                         pred_ms=sim["step_time_s"]["median"] * 1e3,
                         meas_stall=statistics.median(stalls), stall_min=min(stalls), stall_max=max(stalls),
                         pred_stall=sim["stall_fraction"],
                         helpers=statistics.median(r["device_tiles"]["by_helpers"] / max(1, r["device_tiles"]["tiles"])
                                                   for r in real[key])))
    for r in rows:
        r["ratio"] = r["pred_ms"] / r["meas_ms"]
        r["stall_ratio"] = r["pred_stall"] / r["meas_stall"] if r["meas_stall"] > 0 else float("nan")
    err = [abs(r["ratio"] - 1) for r in rows]
    serr = [abs(r["stall_ratio"] - 1) for r in rows if r["meas_stall"] > 0]
    lines = ["| spec | strategy | sched | rounds | measured ms (median, range) | predicted ms | predicted / measured | "
             "measured stall (median, range) | predicted stall | helper tiles |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['spec']} | {r['strategy']} | {r['sched']} | {r['rounds']} | {r['meas_ms']:.2f} "
                     f"({r['meas_min']:.2f}-{r['meas_max']:.2f}) | {r['pred_ms']:.2f} | {r['ratio']:.3f}"
                     f"{'' if abs(r['ratio'] - 1) <= TOL else ' (out)'} | {r['meas_stall']:.3f} "
                     f"({r['stall_min']:.3f}-{r['stall_max']:.3f}) | {r['pred_stall']:.3f} | {r['helpers']:.2f} |")

    def summary(sel, name):
        e = [abs(r["ratio"] - 1) for r in sel]
        s = [abs(r["stall_ratio"] - 1) for r in sel if r["meas_stall"] > 0]
        within = sum(1 for x in e if x <= TOL)
        swithin = sum(1 for x in s if x <= TOL)
        return (f"- {name}: step time: median |predicted / measured - 1| = {statistics.median(e) * 100:.1f} % over "
                f"{len(e)} points, {within} within 15 %; stall fraction: median |predicted / measured - 1| = "
                f"{statistics.median(s) * 100:.1f} % over {len(s)} points, {swithin} within 15 %")

    text = "\n".join(lines) + "\n\n" + summary(rows, "all points") + "\n"
    for spec in sorted({r["spec"] for r in rows}):
        text += summary([r for r in rows if r["spec"] == spec], spec) + "\n"
    for sched in sorted({r["sched"] for r in rows}):
        text += summary([r for r in rows if r["sched"] == sched], f"sched {sched}") + "\n"
    print(text, end="")
    with open(os.path.join(out, "validation.md"), "w") as f:
        f.write(text)
    keys = ["spec", "strategy", "sched", "rounds", "meas_ms", "meas_min", "meas_max", "pred_ms", "ratio",
            "meas_stall", "stall_min", "stall_max", "pred_stall", "helpers"]
    with open(os.path.join(out, "validation.csv"), "w") as f:
        f.write(",".join(keys) + "\n")
        for r in rows:
            f.write(",".join(str(round(r[k], 5)) if isinstance(r[k], float) else str(r[k]) for k in keys) + "\n")
    plot(rows, os.path.join(out, "validation.png"), statistics.median(err), statistics.median(serr) if serr else None)


def plot(rows, path, med, smed):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colors = {"zf-deadline": "tab:red", "eager": "tab:blue", "lws": "tab:green", "dmda": "tab:orange",
              "dmdas": "tab:purple"}
    markers = {"device-adam": "o", "zero-offload": "s", "zenflow": "^"}
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5))
    for ax, mk, pk, unit, title in ((axes[0], "meas_ms", "pred_ms", "ms", "step time (median)"),
                                    (axes[1], "meas_stall", "pred_stall", "", "stall fraction")):
        lo = min(min(r[mk] for r in rows), min(r[pk] for r in rows))
        hi = max(max(r[mk] for r in rows), max(r[pk] for r in rows))
        lo = max(lo * 0.8, 1e-3) if mk == "meas_stall" else lo * 0.8
        hi *= 1.2
        for r in rows:
            face = colors.get(r["sched"], "gray") if r["spec"] == "gpt-kjv" else "none"
            ax.scatter(max(r[mk], lo), max(r[pk], lo), marker=markers.get(r["strategy"], "x"), s=55,
                       facecolors=face, edgecolors=colors.get(r["sched"], "gray"), linewidths=1.5)
        xs = [lo, hi]
        ax.plot(xs, xs, "k-", lw=0.8)
        ax.plot(xs, [x * (1 + TOL) for x in xs], "k:", lw=0.8)
        ax.plot(xs, [x * (1 - TOL) for x in xs], "k:", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel(f"measured {unit}".strip())
        ax.set_ylabel(f"predicted {unit}".strip())
        ax.set_title(title + (" (values below the axis drawn on it)" if mk == "meas_stall" else ""))
    from matplotlib.lines import Line2D
    h = [Line2D([], [], color=c, marker="o", ls="", label=p) for p, c in colors.items()]
    h += [Line2D([], [], color="k", marker=m, ls="", mfc="none", label=s) for s, m in markers.items()]
    h += [Line2D([], [], color="k", marker="o", ls="", label="gpt-kjv (filled)"),
          Line2D([], [], color="k", marker="o", ls="", mfc="none", label="headline (open)"),
          Line2D([], [], color="k", ls=":", label="±15 %")]
    axes[0].legend(handles=h, fontsize=8, loc="upper left")
    fig.suptitle(f"this-machine: simulated vs measured; median |pred/meas - 1|: step {med * 100:.1f} %"
                 + (f", stall {smed * 100:.1f} %" if smed is not None else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
