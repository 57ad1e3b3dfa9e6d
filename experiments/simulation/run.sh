#!/usr/bin/env bash
# Validation of the simulation on this machine (docs/simulation.md): the same spec run for real
# (build/zenflow-run) and simulated on this-machine (bash tools/zf simulate), per strategy; the
# table compares the step time median and the stall fraction. Writes real-*.json, sim-*.json,
# results.csv and summary.md into $OUT (default ./out).
#   bash experiments/simulation/run.sh [extra zenflow-run args, e.g. --steps 200]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$here/out}"
zf_targets=(zenflow-run)
source "$here/../common.sh"
spec="$root/graphs/specs/gpt-kjv.json"
# the steady state: ZenFlow past its full warm-up rounds, a short evaluation (not measured)
common=(--steps 60 --set zenflow.full_warm_up_rounds=0 --set log.warmup_steps=10 -q "$@")
for s in device-adam zero-offload zenflow; do
  echo "== $s: real"
  "$root/build/zenflow-run" "$spec" --strategy "$s" --set data.eval_limit=64 --metrics "$out/real-$s.json" "${common[@]}"
  echo "== $s: simulated on this-machine"
  bash "$root/tools/zf" simulate "$spec" --machine this-machine --strategy "$s" --metrics "$out/sim-$s.json" \
    "${common[@]}" >"$out/sim-$s.log" 2>&1 || { tail -20 "$out/sim-$s.log"; exit 1; }
done
$py "$here/report.py" "$out" device-adam zero-offload zenflow
