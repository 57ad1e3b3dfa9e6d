#!/usr/bin/env bash
# ZenFlow's knobs: topk_ratio x update_interval x max_staleness on the headline spec, against
# median step time and final test accuracy / loss; device-adam and zero-offload as references.
# Writes results.csv, pareto.png, knobs.png and summary table into $OUT (default ./out).
#   bash experiments/zenflow-knobs/run.sh      (about 7 minutes on 2 cores)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$here/out}"
steps="${STEPS:-1250}"
topks="${TOPKS:-0.05 0.1 0.3}"
intervals="${INTERVALS:-1 4 8}"
staleness="${STALENESS:-0 1 2}"
source "$here/../common.sh"
mkdir -p "$out/runs"
common=(--steps "$steps" --set log.every=0 -q)
for s in device-adam zero-offload; do
  echo "reference: $s"
  "$root/build/zenflow-run" "$here/../headline/spec-batch8.json" --strategy "$s" "${common[@]}" --metrics "$out/runs/$s.json"
done
for r in $topks; do
  for k in $intervals; do
    for d in $staleness; do
      overlap=true
      [ "$d" -eq 0 ] && overlap=false
      echo "zenflow topk $r, update_interval $k, max_staleness $d"
      "$root/build/zenflow-run" "$here/../headline/spec-batch8.json" --strategy zenflow "${common[@]}" \
        --set zenflow.topk_ratio="$r" --set zenflow.update_interval="$k" \
        --set zenflow.overlap_step=$overlap --set zenflow.max_staleness="$d" \
        --metrics "$out/runs/zenflow.r$r.k$k.d$d.json"
    done
  done
done
$py "$here/report.py" "$out"
