#!/usr/bin/env bash
# Headline: the same spec under device-adam, zero-offload, zero-offload-dpu and zenflow, in one go
# (and DeepSpeed's Twin-Flow and zenflow at topk 0.1 as extra rows).
# Prints the table, writes results.csv, headline.png and summary.md into $OUT (default: ./out).
#   bash experiments/headline/run.sh [extra zenflow-run args, e.g. --steps 500]
#   CASE=llama2-7b-block bash experiments/headline/run.sh [extra args]
#     the second case: graphs/specs/llama2-7b-block.json (one Llama block at Llama-2-7B's shapes,
#     bf16; about 13 GiB of memory for zero-offload, 15.5 for zenflow) under zero-offload and
#     zenflow, LLAMA_STEPS (8) steps each (the spec's first 2 are warm-up), in ROUNDS (1)
#     interleaved rounds; prints each run's median step and stall fraction (metrics
#     step_time_s.median, stall_fraction) and writes them into $OUT/llama2-7b-block/ (default:
#     ./out/llama2-7b-block).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$here/out}"
if [ "${CASE:-}" = llama2-7b-block ]; then out="${OUT:-$here/out/llama2-7b-block}" zf_targets=(zenflow-run); fi
source "$here/../common.sh"
if [ "${CASE:-}" = llama2-7b-block ]; then
  spec="$root/graphs/specs/llama2-7b-block.json"
  for r in $(seq 1 "${ROUNDS:-1}"); do
    for s in zero-offload zenflow; do
      echo "== round $r: $s (load $(cut -d' ' -f1-3 /proc/loadavg))"
      "$root/build/zenflow-run" "$spec" --strategy "$s" --steps "${LLAMA_STEPS:-8}" --metrics "$out/$s.r$r.json" "$@" |
        tail -n 14
    done
  done
  $py - "$out" "${ROUNDS:-1}" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print("| strategy | median step (ms), median over rounds | rounds (ms) | stall | device busy/step (ms) | bytes/step (MB) | host state (GiB) |")
print("|---|---|---|---|---|---|---|")
for s in ("zero-offload", "zenflow"):
    m = [json.load(open(f"{out}/{s}.r{r}.json")) for r in range(1, rounds + 1)]
    t = [1e3 * x["step_time_s"]["median"] for x in m]
    print(f"| {s} | {statistics.median(t):.0f} | {', '.join('%.0f' % v for v in t)} | "
          f"{statistics.median(x['stall_fraction'] for x in m):.3f} | "
          f"{statistics.median(1e3 * x['device_busy_s_per_step'] for x in m):.0f} | "
          f"{statistics.median((x['bytes']['device_to_host'] + x['bytes']['host_to_device']) / 1e6 for x in m):.0f} | "
          f"{m[0]['host_state_bytes'] / 2**30:.2f} |")
PY
  exit 0
fi
for s in device-adam zero-offload zero-offload-dpu zenflow; do
  echo "== $s"
  "$root/build/zenflow-run" "$here/spec.json" --strategy "$s" --metrics "$out/$s.json" "$@" | tail -n 12
done
# the same zenflow with ten times the columns on the device (the value the accuracy tests use):
# an extra row, not part of the checks
echo "== zenflow, topk_ratio 0.1"
"$root/build/zenflow-run" "$here/spec.json" --strategy zenflow --set zenflow.topk_ratio=0.1 \
  --metrics "$out/zenflow-topk0.1.json" "$@" | tail -n 12
# DeepSpeed's Twin-Flow (docs/spec.md): zero-offload with the first of the four one-parameter
# sub-groups (sub_group_size 0), the 16384 x 784 first layer, on the device (ratio 0.75:
# int(0.25 x 4) = 1 sub-group there); not part of the checks
echo "== twin-flow, ratio 0.75, sub_group_size 0"
"$root/build/zenflow-run" "$here/spec.json" --strategy zero-offload --set zero_optimization.offload_optimizer.ratio=0.75 \
  --set zero_optimization.sub_group_size=0 --metrics "$out/twin-flow.json" "$@" | tail -n 12
$py "$here/report.py" "$out" device-adam zero-offload zero-offload-dpu zenflow zenflow-topk0.1 twin-flow
