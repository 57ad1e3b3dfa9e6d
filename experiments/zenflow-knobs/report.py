"""Pareto plot of ZenFlow's knobs: median step time against final test accuracy."""
import csv
import glob
import json
import os
import sys

out = sys.argv[1]
rows = []
for f in sorted(glob.glob(f"{out}/runs/*.json")):
    m = json.load(open(f))
    z = m.get("zenflow", {})
    rows.append({
        "run": os.path.basename(f)[:-5],
        "strategy": m["strategy"],
        "topk_ratio": z.get("topk_ratio", ""),
        "update_interval": z.get("update_interval", ""),
        "max_staleness": z.get("max_staleness", ""),
        "median_step_ms": 1e3 * m["step_time_s"]["median"],
        "stall_fraction": m["stall_fraction"],
        "eval_accuracy_pct": 100 * m["final"]["eval_accuracy"],
        "eval_loss": m["final"]["eval_loss"],
        "bytes_per_step_MB": (m["bytes"]["device_to_host"] + m["bytes"]["host_to_device"]) / 1e6,
    })
with open(f"{out}/results.csv", "w", newline="") as fh:
    w = csv.DictWriter(fh, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)

def dominated(a, b):  # b at least as fast and as accurate, strictly better in one
    return (b["median_step_ms"] <= a["median_step_ms"] and b["eval_accuracy_pct"] >= a["eval_accuracy_pct"]
            and (b["median_step_ms"] < a["median_step_ms"] or b["eval_accuracy_pct"] > a["eval_accuracy_pct"]))

front = [r for r in rows if not any(dominated(r, o) for o in rows if o is not r)]
lines = ["| run | step (ms) | stall | accuracy (%) | loss | MB/step | Pareto |", "|---|---|---|---|---|---|---|"]
for r in sorted(rows, key=lambda r: r["median_step_ms"]):
    lines.append(f"| {r['run']} | {r['median_step_ms']:.2f} | {r['stall_fraction']:.3f} | "
                 f"{r['eval_accuracy_pct']:.2f} | {r['eval_loss']:.4f} | {r['bytes_per_step_MB']:.2f} | "
                 f"{'yes' if r in front else ''} |")
table = "\n".join(lines)
print(table)
with open(f"{out}/table.md", "w") as fh:
    fh.write(table + "\n")

# Conclusions, computed from the runs (summary.md).
import statistics
zf = [r for r in rows if r["strategy"] == "zenflow"]
ref = {r["strategy"]: r for r in rows if r["strategy"] != "zenflow"}
notes = []
if zf:
    for knob in ("topk_ratio", "update_interval", "max_staleness"):
        parts = []
        for v in sorted({r[knob] for r in zf}):
            sel = [r for r in zf if r[knob] == v]
            parts.append(f"{v}: {statistics.mean(r['median_step_ms'] for r in sel):.2f} ms, "
                         f"{statistics.mean(r['eval_accuracy_pct'] for r in sel):.2f} %")
        notes.append(f"- {knob} (mean over the other knobs' settings): " + "; ".join(parts) + ".")
    fast = min(zf, key=lambda r: r["median_step_ms"])
    acc = max(zf, key=lambda r: r["eval_accuracy_pct"])
    notes.append(f"- fastest zenflow setting: {fast['run']} ({fast['median_step_ms']:.2f} ms, "
                 f"{fast['eval_accuracy_pct']:.2f} %); most accurate: {acc['run']} "
                 f"({acc['median_step_ms']:.2f} ms, {acc['eval_accuracy_pct']:.2f} %).")
    zfront = [r for r in front if r["strategy"] == "zenflow"]
    notes.append(f"- Pareto front (step time vs accuracy, all runs): "
                 + ", ".join(r["run"] for r in sorted(front, key=lambda r: r["median_step_ms"])) + ".")
    if "device-adam" in ref:
        da = ref["device-adam"]
        close = [r for r in zf if r["eval_accuracy_pct"] >= da["eval_accuracy_pct"] - 1]
        notes.append(f"- device-adam: {da['median_step_ms']:.2f} ms, {da['eval_accuracy_pct']:.2f} %; "
                     f"{len(close)} of {len(zf)} zenflow settings are within 1 point of its accuracy.")
    if "zero-offload" in ref:
        zo = ref["zero-offload"]
        faster = [r for r in zf if r["median_step_ms"] < zo["median_step_ms"]]
        notes.append(f"- zero-offload: {zo['median_step_ms']:.2f} ms (stall {zo['stall_fraction']:.3f}), "
                     f"{zo['eval_accuracy_pct']:.2f} %; {len(faster)} of {len(zf)} zenflow settings are faster, "
                     f"by {min(zo['median_step_ms'] / r['median_step_ms'] for r in zf):.2f}x to "
                     f"{max(zo['median_step_ms'] / r['median_step_ms'] for r in zf):.2f}x.")
with open(f"{out}/summary.md", "w") as fh:
    fh.write("# ZenFlow knobs: summary\n\nHeadline spec (experiments/headline/spec-batch8.json), one run per "
             "setting; accuracy is the final test accuracy.\n\n" + table + "\n\n## Conclusions\n\n"
             + "\n".join(notes) + "\n\nPlot: pareto.png; every run: results.csv.\n")
print("\n".join(notes))
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5.5))
    marker = {0: "o", 1: "s", 2: "^"}
    for r in rows:
        if r["strategy"] != "zenflow":
            ax.scatter(r["median_step_ms"], r["eval_accuracy_pct"], c="black", marker="*", s=140)
            ax.annotate(r["strategy"], (r["median_step_ms"], r["eval_accuracy_pct"]), fontsize=8,
                        xytext=(4, 4), textcoords="offset points")
            continue
        sc = ax.scatter(r["median_step_ms"], r["eval_accuracy_pct"], c=[float(r["topk_ratio"])],
                        cmap="viridis", vmin=0, vmax=0.35, marker=marker.get(r["max_staleness"], "x"), s=60)
        ax.annotate(f"K{r['update_interval']}", (r["median_step_ms"], r["eval_accuracy_pct"]), fontsize=7,
                    xytext=(3, -9), textcoords="offset points")
    fx = sorted(front, key=lambda r: r["median_step_ms"])
    ax.plot([r["median_step_ms"] for r in fx], [r["eval_accuracy_pct"] for r in fx], "k--", lw=0.8,
            label="Pareto front")
    fig.colorbar(sc, ax=ax, label="topk_ratio")
    ax.set_xlabel("median step time (ms)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("ZenFlow knobs (o: staleness 0, square: 1, triangle: 2; K = update_interval)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(f"{out}/pareto.png", dpi=110)
    print(f"wrote {out}/results.csv, {out}/table.md, {out}/summary.md, {out}/pareto.png")
except ImportError:
    print("no matplotlib: no plot")
