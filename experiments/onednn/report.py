# Summary of experiments/onednn/run.sh: the matmul rates at the GPT's shapes and the GPT step times
# before and after, as ratios of medians over the rounds.
import csv
import glob
import json
import re
import statistics
import sys

out = sys.argv[1]
rows = [json.loads(l) for l in open(f"{out}/matmul.jsonl")]
print("## One matmul call, one thread (GFLOP/s)\n")
print("| layer | product | weight | M x N x K | OpenBLAS | oneDNN fp32 | oneDNN bf16 | bf16 + conversion | fp32 / OpenBLAS | bf16 / fp32 |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['layer']} | {r['op']} | {'(in, out)' if r['in_out'] else '(out, in)'} | {r['M']} x {r['N']} x {r['K']} | "
          f"{r['openblas']:.0f} | {r['onednn_f32']:.0f} | {r['onednn_bf16']:.0f} | {r['onednn_bf16_with_conversion']:.0f} | "
          f"{r['onednn_f32'] / r['openblas']:.2f} | {r['onednn_bf16'] / r['onednn_f32']:.2f} |")
gm = lambda k: statistics.geometric_mean([r[k] for r in rows])
print(f"\nGeometric means: OpenBLAS {gm('openblas'):.0f}, oneDNN fp32 {gm('onednn_f32'):.0f}, "
      f"bf16 {gm('onednn_bf16'):.0f} ({gm('onednn_bf16_with_conversion'):.0f} with the conversion).")
print("\n## SGEMM 2048^3\n")
for l in open(f"{out}/sgemm.jsonl"):
    s = json.loads(l)
    print(f"- {s['threads']} thread(s): OpenBLAS {s['openblas']:.0f} GFLOP/s, oneDNN fp32 {s['onednn_f32']:.0f} ({s['impl']})")
steps = [json.loads(l) for l in open(f"{out}/steps.jsonl")]
med = {}
for w in sorted({s["what"] for s in steps}):
    v = [s["median_s"] for s in steps if s["what"] == w]
    med[w] = statistics.median(v)
    print(f"\n- {w}: median {1e3 * med[w]:.2f} ms (rounds: {', '.join('%.2f' % (1e3 * x) for x in v)})", end="")
print("\n\n## Ratios (of the medians over the rounds)\n")
for a, b in [("before-fp32", "after-fp32"), ("before-bf16", "after-bf16"), ("after-fp32", "after-bf16"),
             ("before-fp32", "before-bf16")]:
    if a in med and b in med:
        print(f"- {a} / {b}: {med[a] / med[b]:.2f}x")
gflop = 5.73  # a gpt-kjv step (experiments/torch-peer)
if "after-fp32" in med:
    print(f"\nafter-fp32: {gflop / med['after-fp32']:.0f} GFLOP/s on the step's 5.73 GFLOP")
print(f"\nload during the steps: {min(s['load'] for s in steps):.2f}-{max(s['load'] for s in steps):.2f}")

# The GPT step's matmul rate against oneDNN's own on 2 threads at the same shapes (issue 30's 0.6):
# measured on 2 threads, and twice the 1-thread rate (perfect scaling: a bound a loaded machine's
# 2-thread measurement can fall far below)
MATMUL = re.compile(r"^(fwd|bwd)\.(?:h\d+\.)?(c_attn|attn\.c_proj|c_fc|mlp\.c_proj|lm_head)(?:\.(dx|dw))?$")
LAYER = {"c_attn": "attn.c_attn", "attn.c_proj": "attn.c_proj", "c_fc": "mlp.c_fc", "mlp.c_proj": "mlp.c_proj",
         "lm_head": "lm_head"}
OP = {None: "fwd", "dx": "bwd_data", "dw": "bwd_weight"}


def matmul_tasks(path):  # the linear-layer matmul tasks of a --trace-csv: ((layer, op), seconds, step)
    for t in csv.DictReader(open(path)):
        mm = MATMUL.match(t["name"])
        if mm and t["side"] == "device":
            yield ((LAYER[mm.group(2)], OP[mm.group(3) if mm.group(1) == "bwd" else None]),
                   (float(t["end_us"]) - float(t["start_us"])) * 1e-6, int(t["step"]))


def rates(path, factor):  # (layer, op) of the (out, in) layout (device-adam's) -> GFLOP/s
    try:
        return {(r["layer"], r["op"]): dict(r, onednn_f32=factor * r["onednn_f32"])
                for r in map(json.loads, open(path)) if not r["in_out"]}
    except FileNotFoundError:
        return {}


yard = {"2 threads": rates(f"{out}/dnnl2.jsonl", 1.0), "2 x 1 thread": rates(f"{out}/dnnl1.jsonl", 2.0)}
yard = {k: v for k, v in yard.items() if v}
traces = sorted(glob.glob(f"{out}/traces/fp32.r*.csv"))
if yard and traces:
    print("\n## The GPT step's matmuls against oneDNN's own fp32 matmul at the same shapes\n")
    print("| round | matmul GFLOP a step | matmul task time a step (ms) | step's matmul GFLOP/s | " +
          " | ".join(f"oneDNN {k} (GFLOP/s) | ratio" for k in yard) + " |")
    print("|---|---|---|---|" + "---|---|" * len(yard))
    ratios = {k: [] for k in yard}
    for path in traces:
        flop = secs = 0.0
        ideal = {k: 0.0 for k in yard}
        seen = set()
        for key, s, step in matmul_tasks(path):
            c = next(iter(yard.values()))[key]
            f = 2.0 * c["M"] * c["N"] * c["K"]
            flop += f
            secs += s
            for k, y in yard.items():
                ideal[k] += f / (y[key]["onednn_f32"] * 1e9)
            seen.add(step)
        n = len(seen)
        rnd = re.search(r"r(\d+)\.csv$", path).group(1)
        cells = []
        for k in yard:
            ratios[k].append(ideal[k] / secs)
            cells.append(f"{flop / ideal[k] * 1e-9:.0f} | {ideal[k] / secs:.2f}")
        print(f"| {rnd} | {flop / n * 1e-9:.2f} | {secs / n * 1e3:.2f} | {flop / secs * 1e-9:.0f} | " +
              " | ".join(cells) + " |")
    for k in yard:
        m = statistics.median(ratios[k])
        print(f"\nAgainst oneDNN {k}: median over the rounds **{m:.2f}** (issue 30's target >= 0.6: "
              f"{'met' if m >= 0.6 else 'NOT met'}). Per shape (GFLOP/s): " +
              ", ".join(f"{a} {b} {v['onednn_f32']:.0f}" for (a, b), v in yard[k].items()) + ".")

# The ceiling (issue 30's two step targets): each run kind's step with its linear-layer matmuls
# at twice oneDNN's one-thread rate per call at each shape (out/matmul.jsonl: perfect scaling on
# 2 cores, no conversion, no tiles) and everything else as measured: the step's median minus its
# matmul task time a step (the device's critical path besides the matmuls: the other kernels, the
# gaps between tasks). What the step can reach by faster matmuls alone.
percall = {(r["layer"], r["op"]): r for r in rows if not r["in_out"]}


def matmul_time(path, rate_key):  # (measured matmul task s a step, the same FLOPs at 2 x the per-call rate)
    secs = ideal = 0.0
    seen = set()
    for key, s, step in matmul_tasks(path):
        c = percall[key]
        secs += s
        ideal += 2.0 * c["M"] * c["N"] * c["K"] / (2.0 * c[rate_key] * 1e9)
        seen.add(step)
    return secs / len(seen), ideal / len(seen)


ceil = {}
for what, trace, key in (("after-fp32", "fp32", "onednn_f32"), ("after-bf16", "bf16", "onednn_bf16")):
    per_round = []
    for s in steps:
        path = f"{out}/traces/{trace}.r{s['round']}.csv"
        if s["what"] != what or not glob.glob(path):
            continue
        m, i = matmul_time(path, key)
        per_round.append((s["median_s"], m, i))
    if per_round:
        ceil[what] = tuple(statistics.median(x[j] for x in per_round) for j in range(3))
if ceil:
    print("\n## The ceiling: the step with its matmuls at twice oneDNN's one-thread rate per call\n")
    print("| run | step (ms) | matmul tasks (ms) | the rest (ms) | matmuls at 2 x the per-call rate (ms) | ceiling step (ms) |")
    print("|---|---|---|---|---|---|")
    for w, (st, m, i) in ceil.items():
        print(f"| {w} | {st * 1e3:.2f} | {m * 1e3:.2f} | {(st - m) * 1e3:.2f} | {i * 1e3:.2f} | {(st - m + i) * 1e3:.2f} |")
    cs = {w: st - m + i for w, (st, m, i) in ceil.items()}
    if "before-fp32" in med and "after-fp32" in cs:
        st, m, i = ceil["after-fp32"]
        need = med["before-fp32"] / 1.8
        print(f"\n- before-fp32 / the fp32 ceiling: **{med['before-fp32'] / cs['after-fp32']:.2f}x** (target 1.8x: a step "
              f"of {need * 1e3:.2f} ms, which with the matmuls at the ceiling leaves {(need - i) * 1e3:.2f} ms for the "
              f"rest, now {(st - m) * 1e3:.2f}).")
    if "after-fp32" in med and "after-bf16" in cs:
        print(f"- after-fp32 (measured) / the bf16 ceiling: **{med['after-fp32'] / cs['after-bf16']:.2f}x**; the fp32 "
              f"ceiling / the bf16 ceiling: {cs['after-fp32'] / cs['after-bf16']:.2f}x (target 1.5x).")
