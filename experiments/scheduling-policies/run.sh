#!/usr/bin/env bash
# Scheduling policies: the headline spec under StarPU's policies, for zenflow and zero-offload,
# REPEATS runs each (default 3), after calibrating the performance models of the model-based
# policies. Writes results.csv, step_time.png, stall.png and summary.md into $OUT (default ./out).
#   bash experiments/scheduling-policies/run.sh            (about 6 minutes on 2 cores)
#   STEPS=300 REPEATS=2 POLICIES="eager lws dmdas" bash experiments/scheduling-policies/run.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$here/out}"
steps="${STEPS:-300}"
repeats="${REPEATS:-3}"
policies="${POLICIES:-eager prio random ws lws dm dmda dmdar dmdas dmdasd heteroprio modular-heft modular-heft-prio}"
source "$here/../common.sh"
mkdir -p "$out/runs"
run() {  # strategy policy tag [extra env]
  "$root/build/zenflow-run" "$root/experiments/headline/spec-batch8.json" --strategy "$1" --sched "$2" \
    --steps "$steps" --set log.every=0 --set data.eval_limit=1000 -q --metrics "$out/runs/$1.$2.$3.json"
}
# Calibration: model-based policies (dm*, modular-heft*) need STARPU_CALIBRATE_MINIMUM samples per
# codelet and size; two calibrating runs per strategy fill the history models in $STARPU_HOME.
for s in zenflow zero-offload; do
  for i in 1 2; do STARPU_CALIBRATE=1 run "$s" dmda "calibrate$i"; done
done
rm -f "$out"/runs/*calibrate*.json
export STARPU_CALIBRATE=0
for r in $(seq 1 "$repeats"); do
  for p in $policies; do
    for s in zenflow zero-offload; do
      echo "repeat $r: $s under $p"
      run "$s" "$p" "r$r"
    done
  done
done
$py "$here/report.py" "$out"
