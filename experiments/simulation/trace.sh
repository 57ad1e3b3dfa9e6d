#!/usr/bin/env bash
# The calibration's real runs (docs/simulation.md, "Calibration"), shared by measure.sh and by
# `tools/zf simulate --machine this-machine` (calibrated on first use): per spec, two calibrating
# runs per strategy for the model-based policies (dm*), one traced run per strategy under
# zf-deadline (--trace-csv: calibrate.py's input), gpt-kjv's strategies traced under each other
# policy (calibrate.py's per-policy per-task overhead) and the headline's under eager (with
# gpt-kjv's: calibrate.py's task times with no helper). Writes
# DIR/<spec>.<strategy>.zf-deadline.tasks.csv (and .rtrace.json, the run's metrics),
# DIR/gpt-kjv.<strategy>.<policy>.tasks.csv and DIR/headline.<strategy>.eager.tasks.csv.
#   ZENFLOW_RUN=build/zenflow-run bash experiments/simulation/trace.sh DIR
#   env: SPECS (gpt-kjv headline), STRATEGIES (device-adam zero-offload zenflow),
#        POLICIES (zf-deadline eager lws dmda dmdas), STARPU_HOME (the dm* models' home)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dir=${1:?usage: trace.sh DIR}
bin=${ZENFLOW_RUN:-$root/build/zenflow-run}
specs="${SPECS:-gpt-kjv headline}"
strategies="${STRATEGIES:-device-adam zero-offload zenflow}"
policies="${POLICIES:-zf-deadline eager lws dmda dmdas}"
mkdir -p "$dir"
source "$here/specs.sh"
run() {  # spec strategy sched tag [extra]: metrics DIR/spec.strategy.sched.<tag>.json
  local spec=$1 s=$2 p=$3 tag=$4; shift 4
  # shellcheck disable=SC2046
  "$bin" "$(spec_file "$spec")" --strategy "$s" --sched "$p" $(spec_args "$spec") \
    --set zenflow.full_warm_up_rounds=0 --set log.every=0 -q --metrics "$dir/$spec.$s.$p.$tag.json" "$@"
}
# model-based policies (dm*) need calibrated history models: two calibrating runs per spec and strategy
if [[ " $policies " == *" dm"* ]]; then
  for spec in $specs; do for s in $strategies; do for i in 1 2; do
    STARPU_CALIBRATE=1 run "$spec" "$s" dmda "calibrate$i" >/dev/null
  done; done; done
  rm -f "$dir"/*calibrate*.json
fi
export STARPU_CALIBRATE=0
# the calibration's input: one run per spec and strategy under zf-deadline with the per-task CSV
for spec in $specs; do for s in $strategies; do
  run "$spec" "$s" zf-deadline rtrace --trace-csv "$dir/$spec.$s.zf-deadline.tasks.csv"
done; done
# and gpt-kjv's device-adam under each other policy: the per-policy per-task overhead
for spec in $specs; do for s in $strategies; do for p in $policies; do
  # gpt-kjv under every other policy; the headline under eager (calibrate.py's unhelped task times)
  [ "$p" = zf-deadline ] && continue
  [ "$spec" = gpt-kjv ] || [ "$p" = eager ] || continue
  run "$spec" "$s" "$p" rtrace --trace-csv "$dir/$spec.$s.$p.tasks.csv"
done; done; done
