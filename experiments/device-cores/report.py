"""Summarises experiments/device-cores runs: out/results.csv, out/summary.md, out/step_time.png."""
import csv
import json
import statistics
import sys
from pathlib import Path

out = Path(sys.argv[1])
rows = []
for line in (out / "runs.txt").read_text().split("\n"):
    if not line.strip():
        continue
    r, cfg, model, load, path = line.split()
    m = json.loads(Path(path).read_text())
    rows.append({"repeat": int(r), "config": cfg, "model": model, "load": float(load),
                 "step_ms": m["step_time_s"]["median"] * 1e3, "stall": m["stall_fraction"],
                 "cpu_over_wall": m.get("cpu_over_wall", float("nan")), "cpu_seconds": m.get("cpu_seconds", float("nan")),
                 "workers": "%d+%d" % (m["workers"]["device"], m["workers"]["host"])})
with open(out / "results.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)

cfgs = [c for c in ["base", "lws", "zf-1", "zf-all"] if any(x["config"] == c for x in rows)]
models = ["gpt", "mlp-zenflow", "mlp-zero-offload"]
med = lambda xs: statistics.median(xs) if xs else float("nan")
def sel(cfg, model, key):
    return [x[key] for x in rows if x["config"] == cfg and x["model"] == model]
lines = ["# device-cores: summary", "",
         "Median over %d repeats (interleaved) of each run's median step time; CPU time over wall "
         "time of the training loop; load average (1 min) when each run ended: %.1f-%.1f." %
         (max(x["repeat"] for x in rows), min(x["load"] for x in rows), max(x["load"] for x in rows)), "",
         "| model | config | workers | step ms | stall | cpu/wall |", "|---|---|---|---|---|---|"]
for model in models:
    for cfg in cfgs:
        wk = sel(cfg, model, "workers")
        if not wk:
            continue
        lines.append("| %s | %s | %s | %.2f | %.3f | %.2f |" % (
            model, cfg, wk[0] if wk else "-", med(sel(cfg, model, "step_ms")), med(sel(cfg, model, "stall")),
            med(sel(cfg, model, "cpu_over_wall"))))
lines.append("")
# ratios per repeat (interleaved: the runs of one repeat ran next to each other)
def ratio(model, a, b):
    rs = []
    for r in sorted({x["repeat"] for x in rows}):
        xa = [x["step_ms"] for x in rows if x["repeat"] == r and x["config"] == a and x["model"] == model]
        xb = [x["step_ms"] for x in rows if x["repeat"] == r and x["config"] == b and x["model"] == model]
        if xa and xb:
            rs.append(xa[0] / xb[0])
    return rs
for a, b in [("base", "zf-all"), ("lws", "zf-all"), ("zf-1", "zf-all")]:
    rs = ratio("gpt", a, b)
    if not rs:
        continue
    lines.append("- GPT step time %s / %s: median %.2f (per repeat: %s)" % (a, b, med(rs), ", ".join("%.2f" % x for x in rs)))
for cfg in cfgs:
    rs = []
    for r in sorted({x["repeat"] for x in rows}):
        z = [x["step_ms"] for x in rows if x["repeat"] == r and x["config"] == cfg and x["model"] == "mlp-zenflow"]
        o = [x["step_ms"] for x in rows if x["repeat"] == r and x["config"] == cfg and x["model"] == "mlp-zero-offload"]
        if z and o:
            rs.append(o[0] / z[0])
    if not rs:
        continue
    lines.append("- headline MLP under %s: zero-offload / zenflow step time, median %.2f (per repeat: %s)" %
                 (cfg, med(rs), ", ".join("%.2f" % x for x in rs)))
(out / "summary.md").write_text("\n".join(lines) + "\n")

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(12, 4))
    for ax, model in zip(axes, models):
        ax.boxplot([sel(c, model, "step_ms") for c in cfgs], labels=cfgs)
        ax.set_title(model)
        ax.set_ylabel("median step time (ms)")
    fig.tight_layout()
    fig.savefig(out / "step_time.png", dpi=100)
except ImportError:
    print("matplotlib missing: no plot", file=sys.stderr)
