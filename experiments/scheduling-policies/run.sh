#!/usr/bin/env bash
# Scheduling policies on the headline spec (experiments/headline/spec.json, where zero-offload
# stalls): StarPU's policies and ours (zf-deadline), task priorities on and off, zenflow at
# max_staleness 1 and 2 and zero-offload (which has no staleness: run once per policy and
# priority setting), REPEATS interleaved repeats with the configuration order shuffled per repeat
# (seeded by the repeat number), after calibrating the performance models of the model-based
# policies. Writes results.csv, table.md, summary.md and step_time.png, stall.png, staleness.png
# into $OUT (default ./out); the order of every repeat goes to $OUT/order.txt.
#   bash experiments/scheduling-policies/run.sh       (every policy of --list-policies; about an hour)
#   STEPS=50 REPEATS=3 POLICIES="lws zf-deadline" bash experiments/scheduling-policies/run.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$here/out}"
steps="${STEPS:-50}"
repeats="${REPEATS:-3}"
source "$here/../common.sh"
# every policy zenflow-run can run: StarPU's (less the ones it refuses, named on stderr) and ours
policies="${POLICIES:-$("$root/build/zenflow-run" --list-policies 2>/dev/null | tr '\n' ' ')}"
mkdir -p "$out/runs"
start=$(date +%s)
run() {  # strategy policy priorities staleness tag
  local st=()
  [ "$1" = zenflow ] && st=(--set "zenflow.max_staleness=$4")
  "$root/build/zenflow-run" "$root/experiments/headline/spec.json" --strategy "$1" --sched "$2" \
    --steps "$steps" --set log.every=0 --set data.eval_limit=100 --set "runtime.priorities=$3" "${st[@]}" \
    -q --metrics "$out/runs/$1.$2.prio-$3.stale-$4.$5.json"
}
# Calibration: model-based policies (dm*, modular-heft*) need STARPU_CALIBRATE_MINIMUM samples per
# codelet and size; two calibrating runs per strategy fill the history models in $STARPU_HOME.
for s in zenflow zero-offload; do
  for i in 1 2; do STARPU_CALIBRATE=1 run "$s" dmda true 1 "calibrate$i"; done
done
rm -f "$out"/runs/*calibrate*.json
export STARPU_CALIBRATE=0
configs=()
for p in $policies; do
  for pr in true false; do
    configs+=("zenflow $p $pr 1" "zenflow $p $pr 2" "zero-offload $p $pr na")
  done
done
: >"$out/order.txt"
for r in $(seq 1 "$repeats"); do
  mapfile -t order < <(printf '%s\n' "${configs[@]}" | $py -c "import random,sys; l=sys.stdin.read().splitlines(); random.Random($r).shuffle(l); print('\n'.join(l))")
  for c in "${order[@]}"; do
    echo "repeat $r: $c" | tee -a "$out/order.txt"
    # shellcheck disable=SC2086
    run $c "r$r"
  done
done
echo "measured runs took $(( ($(date +%s) - start) / 60 )) minutes (calibration included)" | tee -a "$out/order.txt"
$py "$here/report.py" "$out"
