#!/usr/bin/env python3
"""Measured against simulated step time and stall fraction (experiments/simulation/run.sh).
Usage: report.py OUT STRATEGY..."""
import json
import os
import sys


def main(out, strategies):
    rows = []
    for s in strategies:
        r = json.load(open(os.path.join(out, f"real-{s}.json")))
        p = json.load(open(os.path.join(out, f"sim-{s}.json")))
        rows.append((s, r["sched"], r["step_time_s"]["median"] * 1e3, p["step_time_s"]["median"] * 1e3,
                     r["stall_fraction"], p["stall_fraction"]))
    lines = ["| strategy | sched | measured ms | predicted ms | predicted / measured | measured stall | predicted stall |",
             "|---|---|---|---|---|---|---|"]
    csv = ["strategy,sched,measured_ms,predicted_ms,measured_stall,predicted_stall"]
    for s, sched, rm, pm, rs, ps in rows:
        lines.append(f"| {s} | {sched} | {rm:.2f} | {pm:.2f} | {pm / rm:.2f} | {rs:.3f} | {ps:.3f} |")
        csv.append(f"{s},{sched},{rm:.4f},{pm:.4f},{rs:.4f},{ps:.4f}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "results.csv"), "w") as f:
        f.write("\n".join(csv) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
