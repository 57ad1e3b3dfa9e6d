"""Table, CSV, plot and summary of experiments/torch-peer/run.sh's raw.jsonl (one line per measurement).

Every figure is the median over the rounds of each measurement's own median step (or SGEMM rate);
PyTorch's best is the thread set-up with the lowest of those medians. FLOP rates use the count of
docs/ and issue 20: GPT 6 x params x tokens + 12 x layers x B x T^2 x C; MLP 6 x params x B."""
import collections
import csv
import json
import statistics
import sys

out = sys.argv[1]
rows = [json.loads(l) for l in open(f"{out}/raw.jsonl") if l.strip()]
by = collections.defaultdict(list)
for r in rows:
    by[r["what"]].append(r)
med = lambda what, key: statistics.median(r[key] for r in by[what])
flops = {}
for r in rows:
    if r["what"].startswith("torch:"):
        flops[r["what"].split(":")[1]] = r["flops_per_step"]
sgemm2 = med("sgemm:blas2", "gflops_median")
sgemm1 = med("sgemm:blas1", "gflops_median")
# oneDNN's fp32 2048^3 (runs before it was measured have none)
dnnl = {t: med(f"sgemm:onednn{t}", "gflops_median") for t in (1, 2) if f"sgemm:onednn{t}" in by}

table, csvrows, checks, plot = [], [], [], {}
for model in ("gpt-kjv", "mlp-fashion"):
    eng = f"zenflow:{model}"
    if eng not in by:
        continue
    peers = sorted((w for w in by if w.startswith(f"torch:{model}:")), key=lambda w: med(w, "median_s"))
    best = peers[0]
    t_eng, t_best = med(eng, "median_s"), med(best, "median_s")
    f = flops[model]
    entries = [(eng, "zenflow-run device-adam")] + [(w, "PyTorch " + w.split(":", 2)[2].replace(":", ", ")) for w in peers]
    for w, label in entries:
        t = med(w, "median_s")
        ts = [r["median_s"] for r in by[w]]
        extra = ""
        if w == eng and "cpu_over_wall" in by[w][0]:
            extra = f"{statistics.median(r['cpu_over_wall'] for r in by[w]):.2f}"
        table.append(f"| {model} | {label}{' (best)' if w == best else ''} | {1e3 * t:.2f} | "
                     f"{1e3 * min(ts):.2f}-{1e3 * max(ts):.2f} | {f / t / 1e9:.0f} | {f / t / 1e9 / sgemm2:.2f} | "
                     f"{t_best / t:.2f} | {extra} |")
        csvrows.append({"model": model, "runner": label, "median_step_ms": f"{1e3 * t:.3f}",
                        "min_ms": f"{1e3 * min(ts):.3f}", "max_ms": f"{1e3 * max(ts):.3f}",
                        "gflops": f"{f / t / 1e9:.1f}", "fraction_of_2thread_sgemm": f"{f / t / 1e9 / sgemm2:.3f}",
                        "speedup_vs_torch_best": f"{t_best / t:.3f}", "rounds": len(ts)})
    plot[model] = [(label, 1e3 * med(w, "median_s")) for w, label in entries]
    if model == "gpt-kjv":
        sp = t_best / t_eng
        frac = f / t_eng / 1e9 / sgemm2
        checks.append(f"- GPT step, zenflow-run device-adam vs PyTorch's best ({best.split(':', 2)[2]}): "
                      f"{1e3 * t_eng:.1f} ms vs {1e3 * t_best:.1f} ms, **{sp:.2f}x** (target >= 1.3x: "
                      f"{'met' if sp >= 1.3 else 'NOT met'}).")
        checks.append(f"- GPT FLOP rate: {f / t_eng / 1e9:.0f} GFLOP/s = **{frac:.2f}** of this run's 2-thread SGEMM "
                      f"({sgemm2:.0f} GFLOP/s; 1 thread {sgemm1:.0f}) (target >= 0.5: {'met' if frac >= 0.5 else 'NOT met'}).")
        if 2 in dnnl:
            checks.append(f"- GPT FLOP rate: **{f / t_eng / 1e9 / dnnl[2]:.2f}** of this run's 2-thread oneDNN fp32 "
                          f"matmul 2048^3 ({dnnl[2]:.0f} GFLOP/s; 1 thread {dnnl.get(1, 0):.0f}).")
        if "cpu_over_wall" in by[eng][0]:
            cw = statistics.median(r["cpu_over_wall"] for r in by[eng])
            cores = by[eng][0].get("device_cores")
            checks.append(f"- zenflow-run GPT CPU time / wall time: {cw:.2f}" +
                          (f" with {cores} cores doing device work (target <= {1.05 * cores:.2f}: "
                           f"{'met' if cw <= 1.05 * cores else 'NOT met'})." if cores else "."))
    else:
        checks.append(f"- MLP step: zenflow-run {1e3 * t_eng:.2f} ms vs PyTorch's best ({best.split(':', 2)[2]}) "
                      f"{1e3 * t_best:.2f} ms: {t_best / t_eng:.2f}x.")

hdr = ["| model | runner | median step (ms) | range over rounds (ms) | GFLOP/s | of 2-thread SGEMM | "
       "speed vs PyTorch's best | CPU/wall |", "|---|---|---|---|---|---|---|---|"]
with open(f"{out}/table.md", "w") as fh:
    fh.write("\n".join(hdr + table) + "\n")
with open(f"{out}/results.csv", "w", newline="") as fh:
    w = csv.DictWriter(fh, fieldnames=list(csvrows[0]))
    w.writeheader()
    w.writerows(csvrows)
loads = [r["load"] for r in rows]
rounds = max(r["round"] for r in rows)
summary = [f"# zenflow-run vs PyTorch ({rows[0].get('torch', '') or next(r['torch'] for r in rows if 'torch' in r)}), "
           f"{rounds} interleaved rounds", "",
           f"SGEMM 2048^3 (numpy, this run): {sgemm1:.0f} GFLOP/s on 1 thread, {sgemm2:.0f} on 2" +
           (f"; oneDNN fp32: {dnnl[1]:.0f} on 1, {dnnl[2]:.0f} on 2. " if len(dnnl) == 2 else ". ") +
           f"1-minute load during the runs: {min(loads):.2f}-{max(loads):.2f}.", ""] + checks + ["", *hdr, *table, ""]
with open(f"{out}/summary.md", "w") as fh:
    fh.write("\n".join(summary))
print("\n".join(summary))

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(0)
fig, axes = plt.subplots(1, len(plot), figsize=(6 * len(plot), 4))
axes = axes if len(plot) > 1 else [axes]
for ax, (model, bars) in zip(axes, plot.items()):
    labels = [b[0].replace("PyTorch ", "torch\n").replace("zenflow-run device-adam", "zenflow-run") for b in bars]
    ax.bar(range(len(bars)), [b[1] for b in bars], color=["tab:blue"] + ["tab:orange"] * (len(bars) - 1))
    ax.set_xticks(range(len(bars)), labels, fontsize=8)
    ax.set_ylabel("median step (ms)")
    ax.set_title(f"{model}: step time (lower is better)")
fig.tight_layout()
fig.savefig(f"{out}/torch-peer.png", dpi=110)
