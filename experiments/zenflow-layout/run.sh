#!/usr/bin/env bash
# The (in, out) weight layout (docs/zenflow.md): two builds of zenflow-run, BEFORE (weights stored
# (out, in)) and AFTER (this tree: stored (in, out)), run interleaved (B A B A ...) on the headline
# spec (topk_ratio 0.01 and 0.1, zenflow and zero-offload) and on the batch-8 spec of
# experiments/zenflow-knobs (topk_ratio 0.05, 0.1, 0.3; update_interval 4, staleness 1). Writes
# results.csv (one line per run, with the load average at its start) and summary.md (medians over
# the repeats, the ratios) into $OUT (default ./out).
#   BEFORE=/path/to/old/zenflow-run bash experiments/zenflow-layout/run.sh
# env: REPEATS (3), STEPS (600, headline), KNOB_STEPS (400), SKIP_KNOBS=1, AFTER (build/zenflow-run)
# The GPT (one build, both layouts through model.weight_layout): gpt.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$here/out}"
source "$here/../common.sh"
before="${BEFORE:?set BEFORE to a zenflow-run built before the layout change}"
after="${AFTER:-$root/build/zenflow-run}"
repeats="${REPEATS:-3}"
steps="${STEPS:-600}"
knob_steps="${KNOB_STEPS:-400}"
mkdir -p "$out/runs"
csv="$out/results.csv"
echo "build,spec,strategy,topk,repeat,load1,metrics" > "$csv"
run() {  # build spec strategy topk repeat steps
  local bin="$before" tag="$1"
  [ "$tag" = after ] && bin="$after"
  local m="$out/runs/$tag.$2.$3.$4.r$5.json"
  local load
  load="$(cut -d' ' -f1 /proc/loadavg)"
  local spec="$here/../headline/spec.json" extra=()
  [ "$2" = knobs ] && spec="$here/../headline/spec-batch8.json" &&
    extra=(--set zenflow.update_interval=4 --set zenflow.overlap_step=true --set zenflow.max_staleness=1)
  "$bin" "$spec" --strategy "$3" --steps "$6" --set log.every=0 -q --set zenflow.topk_ratio="$4" \
    "${extra[@]}" --metrics "$m"
  echo "$tag,$2,$3,$4,$5,$load,$m" >> "$csv"
  echo "$tag $2 $3 topk $4 repeat $5 (load $load)"
}
for r in $(seq 1 "$repeats"); do
  for topk in 0.01 0.1; do
    for s in zenflow zero-offload; do
      [ "$s" = zero-offload ] && [ "$topk" = 0.1 ] && continue  # zero-offload has no topk
      for b in before after; do run "$b" headline "$s" "$topk" "$r" "$steps"; done
    done
  done
  if [ -z "${SKIP_KNOBS:-}" ]; then
    for topk in 0.05 0.1 0.3; do
      for b in before after; do run "$b" knobs zenflow "$topk" "$r" "$knob_steps"; done
    done
    for b in before after; do run "$b" knobs zero-offload 0.1 "$r" "$knob_steps"; done
  fi
done
$py "$here/report.py" "$out"
