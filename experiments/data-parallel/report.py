"""ZeRO-stage study (run.sh): results.csv (one row per run), summary.md (tables and the real-node
estimate computed from the measured bytes and times) and host_state.png, host_adam.png,
step_time.png, bytes.png. Runs are out/runs/<strategy>.r<ranks>.s<stage>.json, the same runs over TCP
(btl tcp,self) out/runs-tcp/<strategy>.r<ranks>.s<stage>.json (their step time only)."""
import csv
import glob
import json
import os
import sys

out = sys.argv[1]
tcp = {}  # (strategy, ranks, stage) -> (median step ms, weight hashes) over TCP
for f in glob.glob(f"{out}/runs-tcp/*.json"):
    strategy, r, s = os.path.basename(f)[:-5].rsplit(".", 2)
    m = json.load(open(f))
    tcp[(strategy, int(r[1:]), int(s[1:]))] = (1e3 * m["step_time_s"]["median"], m["data_parallel"]["weight_hashes"])
rows = []
for f in sorted(glob.glob(f"{out}/runs/*.json")):
    strategy, r, s = os.path.basename(f)[:-5].rsplit(".", 2)
    m = json.load(open(f))
    dp = m.get("data_parallel", {})
    R = int(r[1:])
    states = dp.get("host_state_bytes_per_rank", [m["host_state_bytes"]])
    adam = dp.get("host_adam_s_per_step_per_rank", [m["host_adam_s_per_step"]])
    ar = dp.get("allreduce_bytes_per_step", {})
    rows.append({
        "strategy": strategy, "ranks": R, "stage": int(s[1:]),
        "step_ms_median": 1e3 * m["step_time_s"]["median"], "step_ms_p90": 1e3 * m["step_time_s"]["p90"],
        "step_ms_median_tcp": tcp.get((strategy, R, int(s[1:])), (float("nan"),))[0],
        # the final weights over TCP bitwise those over shared memory (the ranks' weight hashes)
        "tcp_weights_equal": (tcp[(strategy, R, int(s[1:]))][1] == dp["weight_hashes"]
                              if (strategy, R, int(s[1:])) in tcp else ""),
        "stall_fraction": m["stall_fraction"],
        "host_state_mb_max_rank": max(states) / 2**20, "host_state_mb_sum": sum(states) / 2**20,
        "host_adam_ms_max_rank": 1e3 * max(adam), "host_adam_ms_sum": 1e3 * sum(adam),
        "allreduce_mb_per_step": (ar.get("gradients", 0) + ar.get("importance", 0)) / 2**20,
        "reduce_scatter_mb_per_step": dp.get("reduce_scatter_bytes_per_step", 0) / 2**20,
        "allgather_mb_per_step": dp.get("allgather_bytes_per_step", 0) / 2**20,
        "d2h_mb_per_step": m["bytes"]["device_to_host"] / 2**20, "h2d_mb_per_step": m["bytes"]["host_to_device"] / 2**20,
        "replicas_identical": dp.get("replicas_identical", True), "train_loss": m["final"]["train_loss"],
    })
if not rows:
    sys.exit(f"no runs in {out}/runs")
rows.sort(key=lambda x: (x["strategy"], x["ranks"], x["stage"]))
with open(f"{out}/results.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    for x in rows:
        w.writerow({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in x.items()})

def get(strategy, R, st):
    for x in rows:
        if x["strategy"] == strategy and x["ranks"] == R and x["stage"] == st:
            return x
    return None

# ---- summary: measured table, then the real-node estimate
L = ["# ZeRO stages on the headline MLP: measured", "",
     "| strategy | ranks | stage | step ms (median) | step ms over TCP (median) | stall | host state MB (largest rank) | host AdamW ms/step (largest rank) | "
     "all-reduce MB/step | reduce-scatter MB/step | all-gather MB/step | replicas identical | TCP weights bitwise equal |",
     "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
for x in rows:
    t = "" if x["ranks"] == 1 else f"{x['step_ms_median_tcp']:.1f}"
    L.append(f"| {x['strategy']} | {x['ranks']} | {x['stage']} | {x['step_ms_median']:.1f} | {t} | {x['stall_fraction']:.3f} | "
             f"{x['host_state_mb_max_rank']:.1f} | {x['host_adam_ms_max_rank']:.2f} | {x['allreduce_mb_per_step']:.2f} | "
             f"{x['reduce_scatter_mb_per_step']:.2f} | {x['allgather_mb_per_step']:.2f} | {x['replicas_identical']} | "
             f"{x['tcp_weights_equal']} |")
L += ["", "## Ratios (stage 2 against stage 0 at the same ranks)", ""]
for s in sorted({x["strategy"] for x in rows}):
    for R in (2, 4):
        a, b = get(s, R, 0), get(s, R, 2)
        if a and b:
            L.append(f"- {s}, {R} ranks: host state per rank x{b['host_state_mb_max_rank'] / a['host_state_mb_max_rank']:.3f} "
                     f"(1/R = {1 / R:.3f}); host AdamW per rank x{b['host_adam_ms_max_rank'] / max(a['host_adam_ms_max_rank'], 1e-9):.3f}; "
                     f"all ranks' host AdamW x{b['host_adam_ms_sum'] / max(a['host_adam_ms_sum'], 1e-9):.3f}; "
                     f"step time x{b['step_ms_median'] / a['step_ms_median']:.3f}")
# Real nodes: every rank has its own cores and memory, so a rank's host AdamW takes the time one
# process takes on its 1/R (the single-process run's host AdamW / R: the work divides exactly, in
# element shares), and the collectives take their wire bytes over the link.
BW = 12.5e9  # bytes/s: a 100 Gb/s link
L += ["", f"## Expected on real nodes (one rank per node, a {BW * 8 / 1e9:.0f} Gb/s link)", "",
      "Host AdamW per rank: the one-process run's host AdamW time / R at stage 2 (each rank updates its 1/R "
      "in element shares), unchanged at stage 0. Wire bytes per rank and step: a ring all-reduce moves 2(R-1)/R of "
      "its buffer, a reduce-scatter and an all-gather (R-1)/R each (the buffer sizes are the measured metrics).", "",
      "| strategy | ranks | stage | host AdamW ms/step per rank | host state MB per rank | wire MB/step per rank | wire ms/step |",
      "|---|---|---|---|---|---|---|"]
for s in sorted({x["strategy"] for x in rows}):
    one = get(s, 1, 0)
    if not one:
        continue
    for R in (1, 2, 4):
        for st in ((0,) if R == 1 else (0, 2)):
            x = get(s, R, st)
            if not x:
                continue
            adam = one["host_adam_ms_max_rank"] / (R if st > 0 else 1)
            state = one["host_state_mb_max_rank"] / (R if st > 0 else 1)
            wire = ((2 * x["allreduce_mb_per_step"] + x["reduce_scatter_mb_per_step"] + x["allgather_mb_per_step"])
                    * (R - 1) / R)
            L.append(f"| {s} | {R} | {st} | {adam:.2f} | {state:.1f} | {wire:.2f} | {wire * 2**20 / BW * 1e3:.2f} |")
open(f"{out}/summary.md", "w").write("\n".join(L) + "\n")
print("\n".join(L))

# ---- plots
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

def lines(key, ylabel, name, title, tcp_key=None):
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for s in sorted({x["strategy"] for x in rows}):
        for st, style in ((0, "-o"), (2, "--s")):
            pts = [(x["ranks"], x[key]) for x in rows if x["strategy"] == s and (x["stage"] == st or x["ranks"] == 1)]
            pts.sort()
            if pts:
                line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=f"{s}, stage {st}")
            tpts = sorted((x["ranks"], x[tcp_key]) for x in rows if tcp_key and x["strategy"] == s
                          and x["stage"] == st and x["ranks"] > 1 and x[tcp_key] == x[tcp_key])
            if pts and tpts:
                ax.plot([p[0] for p in tpts], [p[1] for p in tpts], ":x", color=line.get_color(),
                        label=f"{s}, stage {st}, TCP")
    ax.set_xlabel("ranks")
    ax.set_xticks([1, 2, 4])
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(f"{out}/{name}.png", dpi=110)
    plt.close(fig)

lines("host_state_mb_max_rank", "MB (largest rank)", "host_state", "host optimizer state per rank")
lines("host_adam_ms_max_rank", "ms per step (largest rank)", "host_adam", "host AdamW time per rank")
lines("step_ms_median", "ms (median)", "step_time", "step time (2 shared cores: ranks compete)",
      "step_ms_median_tcp")
fig, ax = plt.subplots(figsize=(8, 4.2))
labels, bottom = [], []
cols = [("allreduce_mb_per_step", "all-reduce"), ("reduce_scatter_mb_per_step", "reduce-scatter"),
        ("allgather_mb_per_step", "all-gather")]
xs = [x for x in rows if x["ranks"] > 1]
acc = [0.0] * len(xs)
for key, lab in cols:
    v = [x[key] for x in xs]
    ax.bar(range(len(xs)), v, bottom=acc, label=lab)
    acc = [a + b for a, b in zip(acc, v)]
ax.set_xticks(range(len(xs)))
ax.set_xticklabels([f"{x['strategy']}\nR={x['ranks']} s{x['stage']}" for x in xs], fontsize=7)
ax.set_ylabel("MB per step (buffer sizes)")
ax.set_title("collective bytes per step")
ax.legend()
fig.tight_layout()
fig.savefig(f"{out}/bytes.png", dpi=110)
plt.close(fig)
