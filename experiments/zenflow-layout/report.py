"""Summary of experiments/zenflow-layout/run.sh: medians over the repeats, per build and setting,
and the ratios asked by issue 20 (zenflow vs zero-offload, after vs before)."""
import csv, json, statistics, sys
from collections import defaultdict

out = sys.argv[1]
rows = list(csv.DictReader(open(f"{out}/results.csv")))
runs = defaultdict(list)  # (build, spec, strategy, topk) -> [(step s, stall, acc, load)]
for r in rows:
    m = json.load(open(r["metrics"]))
    st = m["step_time_s"]["median"]
    stall = m.get("stall_fraction", float("nan"))
    acc = m.get("final", {}).get("eval_accuracy", float("nan"))
    runs[(r["build"], r["spec"], r["strategy"], r["topk"])].append((st, stall, acc, float(r["load1"])))

def med(key, i):
    v = [x[i] for x in runs.get(key, [])]
    return statistics.median(v) if v else float("nan")

lines = ["# zenflow-layout: (out, in) before, (in, out) after", "",
         "| build | spec | strategy | topk | runs | median step ms | median stall | device busy ms (step x (1 - stall)) | median accuracy | load at start (min-max) |",
         "|---|---|---|---|---|---|---|---|---|---|"]
for key in sorted(runs):
    loads = [x[3] for x in runs[key]]
    lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {len(runs[key])} | {1e3 * med(key, 0):.2f} | "
                 f"{med(key, 1):.3f} | {1e3 * med(key, 0) * (1 - med(key, 1)):.1f} | {100 * med(key, 2):.2f} | "
                 f"{min(loads):.2f}-{max(loads):.2f} |")
lines += ["", "Ratios (medians):", ""]
for b in ("before", "after"):
    zo = med((b, "headline", "zero-offload", "0.01"), 0)
    for topk in ("0.01", "0.1"):
        z = med((b, "headline", "zenflow", topk), 0)
        lines.append(f"- {b}: headline, zero-offload / zenflow at topk {topk} = {zo / z:.2f}x, "
                     f"zenflow stall {med((b, 'headline', 'zenflow', topk), 1):.3f}")
for spec, topks in (("headline", ("0.01", "0.1")), ("knobs", ("0.05", "0.1", "0.3"))):
    for topk in topks:
        a, b = med(("after", spec, "zenflow", topk), 0), med(("before", spec, "zenflow", topk), 0)
        if a == a and b == b:
            lines.append(f"- {spec} zenflow topk {topk}: after / before step time = {a / b:.3f}")
    a, b = med(("after", spec, "zero-offload", "0.01" if spec == "headline" else "0.1"), 0), \
        med(("before", spec, "zero-offload", "0.01" if spec == "headline" else "0.1"), 0)
    if a == a and b == b:
        lines.append(f"- {spec} zero-offload: after / before step time = {a / b:.3f}")
open(f"{out}/summary.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
