#!/usr/bin/env bash
# Step time and peak RSS of precision bf16 against fp32 on the CPU device (issue 43's speed target:
# bf16 >= 1.5x faster than fp32 on gpt-kjv.json with device-adam), this tree's zenflow-run against
# an optional BEFORE binary, interleaved per round (these machines are shared: only ratios taken in
# one run mean something).
#   BEFORE=/path/to/old/zenflow-run bash experiments/bf16/steps.sh
#   env: SPECS (gpt-kjv llama-kjv), ROUNDS (3), STEPS (40; the first 5 excluded from the median)
# Writes out-steps/steps.csv (spec, binary, precision, round, median step ms, peak RSS kB) and
# out-steps/summary.md (the medians over the rounds and the ratios).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$here/out-steps"
zf_targets=(zenflow-run)
source "$here/../common.sh"
specs=(${SPECS:-gpt-kjv llama-kjv})
rounds=${ROUNDS:-3}
steps=${STEPS:-40}
bins=("after=$root/build/zenflow-run")
[ -n "${BEFORE:-}" ] && bins=("before=$BEFORE" "${bins[@]}")
csv="$out/steps.csv"
echo "spec,binary,precision,round,median_step_ms,peak_rss_kb" >"$csv"
for r in $(seq "$rounds"); do
  for spec in "${specs[@]}"; do
    for b in "${bins[@]}"; do
      for p in fp32 bf16; do
        name=${b%%=*} bin=${b#*=}
        m="$out/$spec.$name.$p.$r.json"
        /usr/bin/time -f "%M" -o "$out/rss" "$bin" "$root/graphs/specs/$spec.json" --strategy device-adam \
          --steps "$steps" --set precision="\"$p\"" --set log.warmup_steps=5 --set data.eval_limit=32 \
          --metrics "$m" >"$out/$spec.$name.$p.$r.log" 2>&1
        ms=$($py -c "import json,sys; print(round(json.load(open(sys.argv[1]))['step_time_s']['median'] * 1e3, 2))" "$m")
        echo "$spec,$name,$p,$r,$ms,$(tail -1 "$out/rss")" | tee -a "$csv"
      done
    done
  done
done
$py - "$csv" "$out/summary.md" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
med = {}
for key in sorted({(r["spec"], r["binary"], r["precision"]) for r in rows}):
    sel = [r for r in rows if (r["spec"], r["binary"], r["precision"]) == key]
    med[key] = (statistics.median(float(r["median_step_ms"]) for r in sel),
                statistics.median(int(r["peak_rss_kb"]) for r in sel))
lines = ["| spec | binary | fp32 step ms | bf16 step ms | fp32 / bf16 | fp32 peak RSS MiB | bf16 peak RSS MiB |",
         "|---|---|---|---|---|---|---|"]
for spec, b in sorted({(k[0], k[1]) for k in med}):
    f, h = med[(spec, b, "fp32")], med[(spec, b, "bf16")]
    lines.append(f"| {spec} | {b} | {f[0]:.2f} | {h[0]:.2f} | {f[0] / h[0]:.3f}x | {f[1] / 1024:.0f} | {h[1] / 1024:.0f} |")
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
