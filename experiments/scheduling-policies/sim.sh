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
#                                                   POLICIES, MACHINE (h200-pcie5-x1), OUT (./out-sim),
#                                                   SIM_BIN: a built zenflow-run-sim; default: build it)
# Each run is what `bash tools/zf simulate SPEC --machine MACHINE ...` runs (the same machine files
# and environment), without rebuilding per run. Two settings differ from the measured study and
# are forced by the machine: runtime.crossings "device" (the spec's "host" emulates a copy engine
# for CPU device workers; with a CUDA worker the crossings are StarPU's transfers), and the
# automatic worker split of the simulated host (1 CUDA worker + 8 host workers of 16 cores,
# instead of 1 + 1 on the 2-core machine). The model-based policies read the codelets' roofline
# perf models (docs/simulation.md), so there is no calibration pass.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${OUT:-$here/out-sim}"
steps="${STEPS:-50}"
limit="${TIMEOUT:-120}"
machine="${MACHINE:-h200-pcie5-x1}"
bin="${SIM_BIN:-}"
if [ -z "$bin" ]; then
  bash "$root/tools/zf" build-sim
  bin="$root/build-sim/zenflow-run-sim"
fi
[ -x "$bin" ] || { echo "sim.sh: error: SIM_BIN $bin: not an executable zenflow-run-sim" >&2; exit 2; }
mkdir -p "$out/runs" "$out/machine" "$out/logs"
python3 "$root/tools/sim_machine.py" "$root/graphs/machines/$machine.json" "$out/machine" --ranks 1
set -a; . "$out/machine/$machine.env"; set +a
# the environment tools/zf simulate gives zenflow-run-sim
export STARPU_MALLOC_SIMULATION_FOLD="${STARPU_MALLOC_SIMULATION_FOLD:-16}" STARPU_HOME="$out/starpu-home" \
  STARPU_PERF_MODEL_DIR="$out/machine" STARPU_HOSTNAME="$machine" ZF_SIM_ROOFLINE="$out/machine/$machine.roofline" \
  STARPU_SILENT=1
gpu_set=()
((ZF_SIM_GPUS > 0)) && gpu_set=(--set runtime.cuda_workers=1 --set runtime.crossings=device)
policies="${POLICIES:-$("$bin" --list-policies 2>/dev/null | grep -v '\[' | tr '\n' ' ')}"
: >"$out/failures.txt"
# the policies zenflow-run refuses, with its reason (docs/architecture.md)
"$bin" --list-policies 2>&1 >/dev/null | grep '^not usable' >"$out/not-usable.txt" || true
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
      timeout "$limit" "$bin" "$root/experiments/headline/spec.json" "${gpu_set[@]}" --strategy "$1" --sched "$p" \
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
