#!/usr/bin/env bash
# The measured half of the validation (issue 28 item 5): real runs of the specs x strategies x
# StarPU policies on this machine, ROUNDS interleaved rounds (the order shuffled per round, seeded
# by the round number), each run's metrics, one extra traced run per spec and strategy under
# zf-deadline (--trace-csv: the calibration's input), and gpt-kjv's strategies traced under each
# other policy (calibrate.py's per-policy per-task overhead; trace.sh). Run it on a quiet machine;
# the simulated half (sim runs, calibration, report) does not need one. Writes
# $OUT/real/<spec>.<strategy>.<sched>.r<k>.json, <spec>.<strategy>.zf-deadline.tasks.csv and
# gpt-kjv.<strategy>.<sched>.tasks.csv (each traced run's metrics: .rtrace.json).
#   bash experiments/simulation/measure.sh
#   ROUNDS=3 POLICIES="zf-deadline eager lws dmda dmdas" bash experiments/simulation/measure.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$here/out}"
zf_targets=(zenflow-run)
source "$here/../common.sh"
rounds="${ROUNDS:-3}"
policies="${POLICIES:-zf-deadline eager lws dmda dmdas}"
strategies="${STRATEGIES:-device-adam zero-offload zenflow}"
mkdir -p "$out/real"
source "$here/specs.sh"
run() {  # spec strategy sched round [extra]
  local spec=$1 s=$2 p=$3 r=$4; shift 4
  # shellcheck disable=SC2046
  "$root/build/zenflow-run" "$(spec_file "$spec")" --strategy "$s" --sched "$p" $(spec_args "$spec") \
    --set zenflow.full_warm_up_rounds=0 --set log.every=0 -q --metrics "$out/real/$spec.$s.$p.r$r.json" "$@"
}
# the calibration's runs (trace.sh: the dm* models' calibrating runs, the traced runs)
ZENFLOW_RUN="$root/build/zenflow-run" SPECS="gpt-kjv headline" STRATEGIES="$strategies" POLICIES="$policies" \
  bash "$here/trace.sh" "$out/real"
export STARPU_CALIBRATE=0
configs=()
for spec in gpt-kjv headline; do for s in $strategies; do for p in $policies; do configs+=("$spec $s $p"); done; done; done
start=$(date +%s)
for r in $(seq 1 "$rounds"); do
  mapfile -t order < <(printf '%s\n' "${configs[@]}" | $py -c "import random,sys; l=sys.stdin.read().splitlines(); random.Random($r).shuffle(l); print('\n'.join(l))")
  echo "== round $r of $rounds: ${#order[@]} runs (load $(cut -d' ' -f1-3 /proc/loadavg), $(( $(date +%s) - start )) s)"
  for c in "${order[@]}"; do
    read -r spec s p <<<"$c"
    run "$spec" "$s" "$p" "$r"
    echo "$r $spec $s $p $(cut -d' ' -f1 /proc/loadavg)" >>"$out/real/load.txt"
  done
done
echo "== done in $(( $(date +%s) - start )) s (load $(cut -d' ' -f1-3 /proc/loadavg))"
