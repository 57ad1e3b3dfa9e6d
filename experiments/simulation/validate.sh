#!/usr/bin/env bash
# The simulated half of the validation (issue 28 item 5, README.md "Validation"): every
# (spec, strategy, policy) that measure.sh measured ($OUT/real/SPEC.STRATEGY.SCHED.r*.json),
# simulated once on the machine file (default graphs/machines/this-machine.json, calibrated by
# calibrate.py) with measure.sh's options, then validate_report.py: predicted against measured step
# time and stall fraction, the table, the median error and the plot. Simulated time does not depend
# on this machine's load: run it anywhere (nice). Needs the simulation build (bash tools/zf build-sim).
#   OUT=experiments/simulation/out-quiet bash experiments/simulation/validate.sh [MACHINE.json]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../paths.sh"
out="${OUT:-$here/out-quiet}"
machine="${1:-$root/graphs/machines/this-machine.json}"
sim="$out/sim"
mkdir -p "$sim"
spec_file() { case "$1" in gpt-kjv) echo "$root/graphs/specs/gpt-kjv.json" ;; headline) echo "$root/experiments/headline/spec.json" ;; esac; }
spec_args() {  # measure.sh's
  case "$1" in
    gpt-kjv) echo "--steps 60 --set log.warmup_steps=10" ;;
    headline) echo "--steps 200 --set log.warmup_steps=20" ;;
  esac
}
configs=$(ls "$out/real" | sed -n 's/^\([^.]*\)\.\([^.]*\)\.\([^.]*\)\.r[0-9]*\.json$/\1 \2 \3/p' | sort -u)
[ -n "$configs" ] || { echo "validate: error: $out/real: no SPEC.STRATEGY.SCHED.rK.json (run measure.sh)" >&2; exit 2; }
while read -r spec s p; do
  echo "== $spec $s $p"
  # shellcheck disable=SC2046
  ZF_SIM_BUILT="${ZF_SIM_BUILT:-1}" bash "$root/tools/zf" simulate "$(spec_file "$spec")" --machine "$machine" \
    --strategy "$s" --sched "$p" $(spec_args "$spec") --set zenflow.full_warm_up_rounds=0 --set log.every=0 -q \
    --metrics "$sim/$spec.$s.$p.json" >"$sim/$spec.$s.$p.log" 2>&1 || { tail -20 "$sim/$spec.$s.$p.log"; exit 1; }
done <<<"$configs"
/usr/bin/python3 "$here/validate_report.py" "$out"
