"""Table, CSV, plot and summary of experiments/torch-peer/run.sh's raw.jsonl (one line per measurement).

Every figure is the median over the rounds of each measurement's own median step (or SGEMM rate);
PyTorch's best, for each model and precision, is the set-up (threads, OpenBLAS kernels) with the
lowest of those medians. Runs written before the bf16 rows (names without a precision) count as fp32. FLOP rates use the count of
docs/ and issue 20: GPT 6 x params x tokens + 12 x layers x B x T^2 x C; MLP 6 x params x B; the Llama
flop_rate.py's (6 x linear weights x tokens + 12 x layers x B x T^2 x H hs). The Llama/GPT FLOP rate
check (issue 27) counts both with flop_rate.py's count."""
import collections
import csv
import json
import statistics
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flop_rate import root, step_flops  # noqa: E402

out = sys.argv[1]
rows = [json.loads(l) for l in open(f"{out}/raw.jsonl") if l.strip()]
for r in rows:  # older names: zenflow:MODEL, torch:MODEL:ompO:blasB (fp32, the machine's OpenBLAS)
    p = r["what"].split(":")
    if p[0] == "zenflow" and len(p) == 2:
        r["what"] += ":fp32"
    elif p[0] == "torch" and len(p) == 4:
        r["what"] = ":".join(p[:2] + ["fp32"] + p[2:] + ["machine"])
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
label_of = lambda w: "PyTorch " + ", ".join(w.split(":")[3:]).replace("machine", "OpenBLAS as set")
for model in ("gpt-kjv", "llama-kjv", "mlp-fashion"):
    for prec in ("fp32", "bf16"):
        eng = f"zenflow:{model}:{prec}"
        peers = sorted((w for w in by if w.startswith(f"torch:{model}:{prec}:")), key=lambda w: med(w, "median_s"))
        if eng not in by or not peers:
            continue
        best = peers[0]
        t_eng, t_best = med(eng, "median_s"), med(best, "median_s")
        f = flops[model]
        entries = [(eng, "zenflow-run device-adam")] + [(w, label_of(w)) for w in peers]
        for w, label in entries:
            t = med(w, "median_s")
            ts = [r["median_s"] for r in by[w]]
            extra = ""
            if w == eng and "cpu_over_wall" in by[w][0]:
                extra = f"{statistics.median(r['cpu_over_wall'] for r in by[w]):.2f}"
            table.append(f"| {model} | {prec} | {label}{' (best)' if w == best else ''} | {1e3 * t:.2f} | "
                         f"{1e3 * min(ts):.2f}-{1e3 * max(ts):.2f} | {f / t / 1e9:.0f} | {f / t / 1e9 / sgemm2:.2f} | "
                         f"{t_best / t:.2f} | {extra} |")
            csvrows.append({"model": model, "precision": prec, "runner": label, "median_step_ms": f"{1e3 * t:.3f}",
                            "min_ms": f"{1e3 * min(ts):.3f}", "max_ms": f"{1e3 * max(ts):.3f}",
                            "gflops": f"{f / t / 1e9:.1f}", "fraction_of_2thread_sgemm": f"{f / t / 1e9 / sgemm2:.3f}",
                            "speedup_vs_torch_best": f"{t_best / t:.3f}", "rounds": len(ts)})
        plot[f"{model} {prec}"] = [(label, 1e3 * med(w, "median_s")) for w, label in entries]
        sp = t_best / t_eng
        checks.append(f"- {model} {prec}: zenflow-run device-adam {1e3 * t_eng:.2f} ms vs PyTorch's best "
                      f"({label_of(best)[8:]}) {1e3 * t_best:.2f} ms: **{sp:.2f}x** (issue 30's target >= 1.5x: "
                      f"{'met' if sp >= 1.5 else 'NOT met'}).")
        if model == "gpt-kjv" and prec == "fp32":
            frac = f / t_eng / 1e9 / sgemm2
            checks.append(f"- GPT fp32 FLOP rate: {f / t_eng / 1e9:.0f} GFLOP/s = **{frac:.2f}** of this run's 2-thread "
                          f"numpy SGEMM ({sgemm2:.0f} GFLOP/s; 1 thread {sgemm1:.0f}).")
            if 2 in dnnl:
                checks.append(f"- GPT fp32 FLOP rate: **{f / t_eng / 1e9 / dnnl[2]:.2f}** of this run's 2-thread oneDNN fp32 "
                              f"matmul 2048^3 ({dnnl[2]:.0f} GFLOP/s; 1 thread {dnnl.get(1, 0):.0f}).")
            if "cpu_over_wall" in by[eng][0]:
                cw = statistics.median(r["cpu_over_wall"] for r in by[eng])
                cores = by[eng][0].get("device_cores")
                checks.append(f"- zenflow-run GPT CPU time / wall time: {cw:.2f}" +
                              (f" with {cores} cores doing device work." if cores else "."))

# issue 27: the Llama step's FLOP rate against the GPT step's, zenflow-run device-adam fp32, both
# counted by flop_rate.py
if "zenflow:gpt-kjv:fp32" in by and "zenflow:llama-kjv:fp32" in by:
    fl = {k: step_flops(json.load(open(f"{root}/graphs/specs/{k}.json")))[0] for k in ("gpt-kjv", "llama-kjv")}
    rate = {k: fl[k] / med(f"zenflow:{k}:fp32", "median_s") / 1e9 for k in fl}
    ratio = rate["llama-kjv"] / rate["gpt-kjv"]
    checks.append(f"- Llama / GPT FLOP rate (zenflow-run device-adam fp32, flop_rate.py's count: "
                  f"{fl['llama-kjv'] / 1e9:.2f} and {fl['gpt-kjv'] / 1e9:.2f} GFLOP a step): {rate['llama-kjv']:.0f} / "
                  f"{rate['gpt-kjv']:.0f} GFLOP/s = **{ratio:.2f}** (issue 27's target >= 0.9: "
                  f"{'met' if ratio >= 0.9 else 'NOT met'}).")

hdr = ["| model | precision | runner | median step (ms) | range over rounds (ms) | GFLOP/s | of 2-thread SGEMM | "
       "speed vs PyTorch's best | CPU/wall |", "|---|---|---|---|---|---|---|---|---|"]
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
fig, axes = plt.subplots(1, len(plot), figsize=(5 * len(plot), 4.5))
axes = axes if len(plot) > 1 else [axes]
for ax, (model, bars) in zip(axes, plot.items()):
    labels = [b[0].replace("PyTorch ", "torch\n").replace(", OpenBLAS as set", "").replace(", ", "\n")
              .replace("zenflow-run device-adam", "zenflow-run") for b in bars]
    ax.bar(range(len(bars)), [b[1] for b in bars], color=["tab:blue"] + ["tab:orange"] * (len(bars) - 1))
    ax.set_xticks(range(len(bars)), labels, fontsize=6)
    ax.set_ylabel("median step (ms)")
    ax.set_title(f"{model}: step time (lower is better)")
fig.tight_layout()
fig.savefig(f"{out}/torch-peer.png", dpi=110)
