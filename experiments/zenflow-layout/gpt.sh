#!/usr/bin/env bash
# The GPT's block weights in both layouts (model.weight_layout out_in / in_out, one binary),
# interleaved: zenflow on graphs/specs/gpt-kjv.json at topk_ratio 0.1 and 0.01 (no full warm-up,
# so every step is a selective one) and device-adam (whose default stays (out, in)), STEPS steps,
# REPEATS rounds, each run with a task CSV from step 20. Writes $OUT/gpt-results.csv and
# $OUT/gpt-summary.md (gpt_report.py). Run it under `nice` on a shared machine.
#   bash experiments/zenflow-layout/gpt.sh     env: REPEATS (3), STEPS (200), ZF (build/zenflow-run), OUT (./out)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../paths.sh"
out="${OUT:-$here/out}"
zf="${ZF:-$root/build/zenflow-run}"
repeats="${REPEATS:-3}"
steps="${STEPS:-200}"
mkdir -p "$out/raw/gpt"
export STARPU_HOME="$out/raw/gpt/starpu-home" STARPU_SILENT=1
csv="$out/gpt-results.csv"
echo "strategy,topk,layout,repeat,load1,metrics,trace" > "$csv"
for r in $(seq 1 "$repeats"); do
  for s in zenflow:0.1 zenflow:0.01 device-adam:0.1; do
    for layout in out_in in_out; do
      strat="${s%%:*}" topk="${s##*:}"
      base="$out/raw/gpt/$strat.$topk.$layout.r$r"
      load="$(cut -d' ' -f1 /proc/loadavg)"
      "$zf" "$root/graphs/specs/gpt-kjv.json" --strategy "$strat" --steps "$steps" -q \
        --set zenflow.full_warm_up_rounds=0 --set zenflow.topk_ratio="$topk" --set model.weight_layout="$layout" \
        --set data.eval_limit=4 --set log.every=0 --metrics "$base.json" --trace-csv "$base.csv" --trace-from 20
      echo "$strat,$topk,$layout,$r,$load,$base.json,$base.csv" >> "$csv"
      echo "$strat topk $topk $layout round $r (load $load)"
    done
  done
done
/usr/bin/python3 "$here/gpt_report.py" "$out"
