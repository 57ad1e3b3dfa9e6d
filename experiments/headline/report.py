"""Table, CSV, bar chart and summary of the headline runs (metrics JSON files in OUT)."""
import csv
import json
import sys

out, strategies = sys.argv[1], sys.argv[2:]
m = {s: json.load(open(f"{out}/{s}.json")) for s in strategies}
base = m["zero-offload"]["step_time_s"]["median"]
rows = []
for s in strategies:
    x = m[s]
    rows.append({
        "strategy": s,
        "median_step_ms": 1e3 * x["step_time_s"]["median"],
        "device_busy_ms": 1e3 * x["device_busy_s_per_step"],
        "stall_fraction": x["stall_fraction"],
        "bytes_per_step_MB": (x["bytes"]["device_to_host"] + x["bytes"]["host_to_device"]) / 1e6,
        "speedup_vs_zero_offload": base / x["step_time_s"]["median"],
        "eval_accuracy_pct": 100 * x["final"]["eval_accuracy"],
        "staleness_max_steps": x.get("staleness", {}).get("max", 0),
        "host_state_MB": x["host_state_bytes"] / 1e6,
    })
with open(f"{out}/results.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)

hdr = ("| strategy | median step (ms) | device busy/step (ms) | stall | bytes/step (MB) | speedup vs zero-offload "
       "| accuracy (%) | host state (MB) |")
lines = [hdr, "|---|---|---|---|---|---|---|---|"]
for r in rows:
    lines.append(f"| {r['strategy']} | {r['median_step_ms']:.2f} | {r['device_busy_ms']:.2f} | "
                 f"{r['stall_fraction']:.3f} | {r['bytes_per_step_MB']:.2f} | "
                 f"{r['speedup_vs_zero_offload']:.2f}x | {r['eval_accuracy_pct']:.2f} | {r['host_state_MB']:.1f} |")
table = "\n".join(lines)
print(table)

z, zo = m["zenflow"], m["zero-offload"]
checks = [
    ("zero-offload stall >= 0.5", zo["stall_fraction"] >= 0.5),
    ("zenflow stall <= 0.15", z["stall_fraction"] <= 0.15),
    ("zenflow median step >= 1.5x faster than zero-offload",
     zo["step_time_s"]["median"] / z["step_time_s"]["median"] >= 1.5),
    ("zenflow accuracy within 1 pp of zero-offload",
     abs(z["final"]["eval_accuracy"] - zo["final"]["eval_accuracy"]) <= 0.01),
]
verdict = "\n".join(f"- {'PASS' if ok else 'FAIL'}: {name}" for name, ok in checks)
print(verdict)
with open(f"{out}/summary.md", "w") as f:
    f.write(f"# Headline run\n\n{table}\n\n{verdict}\n\nspec: experiments/headline/spec.json, "
            f"{zo['steps']} steps, {zo['warmup_steps_excluded']} warm-up steps excluded, "
            f"workers {zo['workers']['device']} device + {zo['workers']['host']} host, sched {zo['sched']}, "
            f"crossings run by the {zo['spec']['runtime'].get('crossings', 'device')} context\n")

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.8))
    names = [r["strategy"] for r in rows]
    ax[0].bar(names, [r["median_step_ms"] for r in rows], color="#4477aa")
    ax[0].set_title("median step time (ms)")
    ax[1].bar(names, [r["stall_fraction"] for r in rows], color="#cc6677")
    ax[1].set_title("stall fraction")
    ax[1].set_ylim(0, 1)
    ax[2].bar(names, [r["eval_accuracy_pct"] for r in rows], color="#117733")
    ax[2].set_title("test accuracy (%)")
    ax[2].set_ylim(min(r["eval_accuracy_pct"] for r in rows) - 5, 100)
    for a in ax:
        a.tick_params(axis="x", rotation=20)
    fig.tight_layout()
    fig.savefig(f"{out}/headline.png", dpi=110)
    print(f"wrote {out}/results.csv, {out}/summary.md, {out}/headline.png")
except ImportError:
    print(f"wrote {out}/results.csv, {out}/summary.md (no matplotlib: no plot)")
sys.exit(0 if all(ok for _, ok in checks) else 1)
