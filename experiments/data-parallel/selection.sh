#!/usr/bin/env bash
# Exact selection against the local-sum proxy (zenflow.dp_selection, docs/data-parallel.md,
# "Selection across ranks"): the MLP 784-64-10 on 8192 Fashion-MNIST examples, global batch 64,
# 2 epochs (256 steps), zenflow topk 0.1, update_interval 2, a selection every 4 steps; one process,
# then ranks 2, 4 x zero_optimization.stage 0, 2 x {exact, local-sum}, host tiles of 4096
# elements, one device and one host worker per rank. Writes $OUT/selection/*.json and
# *.safetensors, selection.csv and selection.md (selection.py): final evaluation loss and accuracy,
# the weights' distance from one process's, importance bytes per selection, gradient bytes per step.
#   bash experiments/data-parallel/selection.sh      (run.sh calls it; about 5 minutes here)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$here/out}"
source "$here/../common.sh"
dir="$out/selection"
mkdir -p "$dir"
mpirun=$(command -v mpirun) || { echo "selection.sh: mpirun not found (openmpi-bin)" >&2; exit 1; }
[ "$(id -u)" -ne 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$(date +%s)
args=("$root/graphs/specs/mlp-fashion.json" --strategy zenflow --set 'model.hidden=[64]'
  --set data.train_limit=8192 --set data.eval_limit=2000 --set train.batch_size=64 --set train.epochs=2
  --set zenflow.topk_ratio=0.1 --set zenflow.update_interval=2 --set 'zenflow.select_strategy="step"'
  --set zenflow.select_interval=4 --set runtime.tile_elems=4096 --set runtime.device_workers=1
  --set runtime.host_workers=1 --set log.every=0 -q)
echo "one process"
"$root/build/zenflow-run" "${args[@]}" --metrics "$dir/one.json" --save "$dir/one.safetensors"
for r in 2 4; do
  for st in 0 2; do
    for sel in exact local-sum; do
      echo "$r ranks, stage $st, $sel"
      n="$dir/$sel.r$r.s$st"
      "$mpirun" --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np "$r" -x STARPU_HOME -x STARPU_SILENT \
        bash -c 'export STARPU_HOME="$STARPU_HOME/rank-${OMPI_COMM_WORLD_RANK:-0}"; mkdir -p "$STARPU_HOME"; exec "$@"' \
        rank "$root/build/zenflow-run" "${args[@]}" --set "zero_optimization.stage=$st" \
        --set "zenflow.dp_selection=$sel" --metrics "$n.json" --save "$n.safetensors"
    done
  done
done
echo "selection runs took $(( $(date +%s) - start )) s" | tee "$dir/time.txt"
$py "$here/selection.py" "$dir" "$root/tests"
