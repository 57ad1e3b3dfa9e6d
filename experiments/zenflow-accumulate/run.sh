#!/usr/bin/env bash
# Where ZenFlow's per-step accumulation runs (zenflow.accumulate_on, docs/zenflow.md, "Where the
# accumulation runs"): "host" (the default, DeepSpeed's way) against "device", in fp32 and bf16, on
# gpt-kjv.json with zenflow (its warm-up cut to WARMUP steps so the selective phase is timed).
# Interleaved rounds (the machine is shared and noisy: each round runs the four variants back to
# back), then the median over the rounds of each run's median step time, its stall fraction, the
# bytes per step each way, device_state_bytes and host_state_bytes. Writes $OUT/results.csv and
# $OUT/table.md (per-run metrics in $OUT/runs/).
#   bash experiments/zenflow-accumulate/run.sh     env: ROUNDS (3), STEPS (300), WARMUP (100),
#                                                  SPEC (graphs/specs/gpt-kjv.json); about 8 minutes
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$here/out}"
rounds="${ROUNDS:-3}"
steps="${STEPS:-300}"
warmup="${WARMUP:-100}"
zf_targets=(zenflow-run)
source "$here/../common.sh"
spec="${SPEC:-$root/graphs/specs/gpt-kjv.json}"
mkdir -p "$out/runs"
for r in $(seq 1 "$rounds"); do
  for precision in fp32 bf16; do
    for on in host device; do
      echo "round $r: $precision, accumulate_on $on"
      "$root/build/zenflow-run" "$spec" --strategy zenflow --steps "$steps" --set precision="$precision" \
        --set zenflow.accumulate_on="$on" --set zenflow.full_warm_up_rounds="$warmup" \
        --set log.every=0 -q --metrics "$out/runs/$precision.$on.r$r.json" >/dev/null
    done
  done
done
$py - "$out" "$rounds" <<'PY'
import csv, json, os, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = []
for precision in ("fp32", "bf16"):
    for on in ("host", "device"):
        ms = [json.load(open(os.path.join(out, "runs", f"{precision}.{on}.r{r}.json"))) for r in range(1, rounds + 1)]
        m = ms[0]
        rows.append({
            "precision": precision, "accumulate_on": on,
            "median_step_ms": 1e3 * statistics.median(x["step_time_s"]["median"] for x in ms),
            "step_ms_by_round": " ".join(f"{1e3 * x['step_time_s']['median']:.1f}" for x in ms),
            "stall_fraction": statistics.median(x["stall_fraction"] for x in ms),
            "d2h_bytes_per_step": m["bytes"]["device_to_host"], "h2d_bytes_per_step": m["bytes"]["host_to_device"],
            "device_state_bytes": m["device_state_bytes"]["total"],
            "device_accumulator_bytes": m["device_state_bytes"]["accumulator"],
            "host_state_bytes": m["host_state_bytes"],
        })
with open(os.path.join(out, "results.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
lines = ["| precision | accumulate_on | step (ms, median of rounds) | by round | stall | d2h B/step | h2d B/step | device state B | of which accumulator | host state B |",
         "|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    lines.append(f"| {r['precision']} | {r['accumulate_on']} | {r['median_step_ms']:.1f} | {r['step_ms_by_round']} | "
                 f"{r['stall_fraction']:.3f} | {r['d2h_bytes_per_step']:.0f} | {r['h2d_bytes_per_step']:.0f} | "
                 f"{r['device_state_bytes']} | {r['device_accumulator_bytes']} | {r['host_state_bytes']} |")
for precision in ("fp32", "bf16"):
    h = next(r for r in rows if r["precision"] == precision and r["accumulate_on"] == "host")
    d = next(r for r in rows if r["precision"] == precision and r["accumulate_on"] == "device")
    lines.append(f"\n{precision}: step host / device = {h['median_step_ms'] / d['median_step_ms']:.3f}")
open(os.path.join(out, "table.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
