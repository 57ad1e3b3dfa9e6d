#!/usr/bin/env bash
# ZeRO stages on the headline MLP (experiments/headline/spec.json: 784-16384-10, 13 M parameters, so
# the host AdamW is a large part of a step): ranks 1, 2, 4 x zero_optimization.stage 0, 2 x
# {zero-offload, zenflow} (one rank: stage 0 only, every stage is stage 0 there), each rank with the
# spec's worker split (one device and one host worker on 2 cores), global batch 8, host tiles of
# 256 Ki elements. Open MPI with mpi_yield_when_idle: the ranks oversubscribe the cores, and a rank
# busy-polling in a collective would take the core from the rank it waits for (measured on 2 ranks,
# zero-offload: median step 701 ms at stage 0 and 1164 ms at stage 2 polling, 285 and 356 ms
# yielding). Every multi-rank run twice: over shared memory (Open MPI's choice on one host) and over
# TCP (`--mca btl tcp,self`, the transport between hosts), the latter into $OUT/runs-tcp/.
# Writes $OUT/runs/*.json, results.csv, summary.md and host_state.png, host_adam.png,
# step_time.png, bytes.png (report.py); then selection.sh (exact selection against the local-sum
# proxy: $OUT/selection/selection.md).
#   bash experiments/data-parallel/run.sh            (STEPS=30: about 6 minutes on the shared 2 cores)
#   STEPS=20 bash experiments/data-parallel/run.sh
# ZeRO stage 3 runs on a deeper MLP, after these (stage3.sh; STAGE3=0 skips them).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$here/out}"
steps="${STEPS:-30}"
source "$here/../common.sh"
mkdir -p "$out/runs"
mpirun=$(command -v mpirun) || { echo "run.sh: mpirun not found (openmpi-bin)" >&2; exit 1; }
[ "$(id -u)" -ne 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$(date +%s)
mkdir -p "$out/runs-tcp"
run() {  # strategy ranks stage [transport: shm (default) or tcp]
  local m="$out/runs/$1.r$2.s$3.json" btl=()
  if [ "${4:-shm}" = tcp ]; then m="$out/runs-tcp/$1.r$2.s$3.json" btl=(--mca btl tcp,self); fi
  local args=("$root/experiments/headline/spec.json" --strategy "$1" --steps "$steps"
    --set train.batch_size=8 --set log.every=0 --set log.warmup_steps=10 --set data.eval_limit=100
    --set runtime.tile_elems=262144
    --set "zero_optimization.stage=$3" -q --metrics "$m")
  echo "$1, $2 rank(s), stage $3${4:+, $4}"
  if [ "$2" = 1 ]; then
    "$root/build/zenflow-run" "${args[@]}"
  else  # each rank its own StarPU home (two StarPUs calibrating into one can abort)
    "$mpirun" --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 "${btl[@]}" -np "$2" -x STARPU_HOME -x STARPU_SILENT bash -c \
      'export STARPU_HOME="$STARPU_HOME/rank-${OMPI_COMM_WORLD_RANK:-0}"; mkdir -p "$STARPU_HOME"; exec "$@"' \
      rank "$root/build/zenflow-run" "${args[@]}"
  fi
}
for s in zero-offload zenflow; do
  run "$s" 1 0
  for r in 2 4; do
    for st in 0 2; do run "$s" "$r" "$st" && run "$s" "$r" "$st" tcp; done
  done
done
echo "runs took $(( $(date +%s) - start )) s" | tee "$out/time.txt"
$py "$here/report.py" "$out"
# exact selection against the local-sum proxy (zenflow.dp_selection): accuracy and bytes
OUT="$out" bash "$here/selection.sh"
[ "${STAGE3:-1}" = 0 ] || OUT="$out" bash "$here/stage3.sh"
