"""Summary of gpt.sh: per strategy, topk and layout, medians over the rounds of the step time,
device busy time per step (metrics), and per measured step the summed task times (trace CSV, steps
>= 20) of the block weights' selective AdamW (adam.device, the gather fused in), gradient
accumulation and merges, and of the block matmuls (forward, weight and data gradient)."""
import csv, json, re, statistics, sys
from collections import defaultdict

out = sys.argv[1]
block = re.compile(r"h\.\d+\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight")
matmul = re.compile(r"^(fwd\.h\d+\.(c_attn|attn\.c_proj|c_fc|mlp\.c_proj)|bwd\.h\d+\.(c_attn|attn\.c_proj|c_fc|mlp\.c_proj)\.d[wx])$")
cols = ["step ms", "device busy ms", "stall", "adam.device (block W) ms", "accumulate (block W) ms",
        "merge (block W) ms", "block matmuls ms"]
runs = defaultdict(list)
for r in csv.DictReader(open(f"{out}/gpt-results.csv")):
    m = json.load(open(r["metrics"]))
    t = defaultdict(float)
    steps = set()
    for row in csv.DictReader(open(r["trace"])):
        steps.add(row["step"])
        d = (float(row["end_us"]) - float(row["start_us"])) / 1e3
        name = row["name"]
        for kind in ("adam.device", "accumulate", "merge"):
            if name.startswith(kind + ".") and block.search(name):
                t[kind] += d
        if matmul.match(name):
            t["matmul"] += d
    n = max(len(steps), 1)
    runs[(r["strategy"], r["topk"], r["layout"])].append(
        [1e3 * m["step_time_s"]["median"], 1e3 * m["device_busy_s_per_step"], m["stall_fraction"],
         t["adam.device"] / n, t["accumulate"] / n, t["merge"] / n, t["matmul"] / n, float(r["load1"])])

def med(key, i):
    return statistics.median(x[i] for x in runs[key])

lines = ["# zenflow-layout, GPT (graphs/specs/gpt-kjv.json): block weights (out, in) vs (in, out)", "",
         "| strategy | topk | layout | runs | " + " | ".join(cols) + " | load at start |",
         "|---|---|---|---|" + "---|" * len(cols) + "---|"]
for key in sorted(runs):
    loads = [x[-1] for x in runs[key]]
    lines.append(f"| {key[0]} | {key[1] if key[0] == 'zenflow' else '-'} | {key[2]} | {len(runs[key])} | " +
                 " | ".join(f"{med(key, i):.3f}" if i == 2 else f"{med(key, i):.2f}" for i in range(len(cols))) +
                 f" | {min(loads):.1f}-{max(loads):.1f} |")
lines += ["", "in_out / out_in (medians):", ""]
for s, k in (("zenflow", "0.1"), ("zenflow", "0.01"), ("device-adam", "0.1")):
    a, b = (s, k, "in_out"), (s, k, "out_in")
    if a in runs and b in runs:
        lines.append(f"- {s}{' topk ' + k if s == 'zenflow' else ''}: " + ", ".join(
            f"{c} {med(a, i) / med(b, i):.2f}x" for i, c in enumerate(cols) if i != 2 and med(b, i) > 0))
open(f"{out}/gpt-summary.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
