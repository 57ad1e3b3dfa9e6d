#!/usr/bin/env bash
# The simulated H200 column of the scheduling-policies study (issue 28 item 6; docs/simulation.md):
# the same configurations as run.sh (every policy of --list-policies, task priorities on and off,
# zenflow at max_staleness 1 and 2, zero-offload once per policy and priority setting) on the
# simulated machine graphs/machines/h200-pcie5-x1.json, one run each (SimGrid is deterministic: the
# same configuration gives the same simulated times). Writes $OUT/runs/*.json (run.sh's names),
# $OUT/failures.txt (a run that failed or ran past TIMEOUT: exit code and its last line of output),
# then sim_report.py's $OUT/table.md, $OUT/summary.md and $OUT/results.csv (beside run.sh's
# measured out/results.csv).
#   bash experiments/scheduling-policies/sim.sh     (env: STEPS (50), TIMEOUT (120 s per run),
#                                                   POLICIES, MACHINE (h200-pcie5-x1), OUT (./out-sim))
# Each run is `bash tools/zf simulate SPEC --machine MACHINE ...` (ZF_SIM_BUILT=1: built once). Two settings differ from the measured study and
# are forced by the machine: runtime.crossings "device" (the spec's "host" emulates a copy engine
# for CPU device workers; with a CUDA worker the crossings are StarPU's transfers), and the
# automatic worker split of the simulated host (1 CUDA worker + 8 host workers of 16 cores,
# instead of 1 + 1 on the 2-core machine). The model-based policies read the codelets' roofline
# perf models (docs/simulation.md), so there is no calibration pass.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../paths.sh"
out="${OUT:-$here/out-sim}"
steps="${STEPS:-50}"
limit="${TIMEOUT:-120}"
machine="${MACHINE:-h200-pcie5-x1}"
bash "$root/tools/zf" build-sim
mkdir -p "$out/runs" "$out/logs"
# every run through `tools/zf simulate` (its machine files and environment), built once above
sim() { ZF_SIM_BUILT=1 bash "$root/tools/zf" simulate "$root/experiments/headline/spec.json" --machine "$machine" "$@"; }
gpu_set=()
[ "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gpus"]["count"])' \
  "$root/graphs/machines/$machine.json")" -gt 0 ] && gpu_set=(--set runtime.crossings=device)
policies="${POLICIES:-$(sim --list-policies 2>/dev/null | grep -v -e '\[' -e '^zf \[' | tr '\n' ' ')}"
: >"$out/failures.txt"
# the policies zenflow-run refuses, with its reason (docs/architecture.md)
sim --list-policies 2>&1 >/dev/null | grep '^not usable' >"$out/not-usable.txt" || true
start=$(date +%s)
n=0
for p in $policies; do
  for pr in true false; do
    for c in "zenflow 1" "zenflow 2" "zero-offload na"; do
      set -- $c
      st=()
      [ "$1" = zenflow ] && st=(--set "zenflow.max_staleness=$2")
      tag="$1.$p.prio-$pr.stale-$2.sim"
      rm -f "$out/runs/$tag.json"
      rc=0
      # simulate exec's zenflow-run-sim: timeout's signal reaches the run itself
      ZF_SIM_BUILT=1 timeout "$limit" bash "$root/tools/zf" simulate "$root/experiments/headline/spec.json" \
        --machine "$machine" "${gpu_set[@]}" --strategy "$1" --sched "$p" \
        --steps "$steps" --set log.every=0 --set data.eval_limit=100 --set "runtime.priorities=$pr" "${st[@]}" \
        -q --metrics "$out/runs/$tag.json" >"$out/logs/$tag.log" 2>&1 || rc=$?
      n=$((n + 1))
      if ((rc)); then
        echo "$tag: exit $rc$( ((rc == 124)) && echo " (ran past ${limit} s)"): $(grep -v xbt_cfg "$out/logs/$tag.log" | tail -1)" |
          tee -a "$out/failures.txt"
        rm -f "$out/runs/$tag.json"
      fi
    done
  done
done
echo "$n simulated runs in $(( $(date +%s) - start )) s of wall time; $(wc -l <"$out/failures.txt") failed"
python3 "$here/sim_report.py" "$out" "$here/out/results.csv" "$machine"
