#!/usr/bin/env bash
# ZeRO stage 3 against stage 2 (docs/data-parallel.md): zero-offload and zenflow on a deep MLP (784, 8 hidden
# layers of 1024, 10: 8.2 M parameters in 9 layers, the largest 0.8 M, so a layer is small against
# the model, as in a transformer) on 2 and 4 ranks, stages 2 and 3, global batch 8, host tiles of
# 64 Ki elements, 20 steps (5 not measured). Writes $OUT/stage3/*.json and stage3.md (stage3_report.py):
# device parameter and optimizer bytes per rank, weights equal or not, collective bytes and step time.
#   bash experiments/data-parallel/stage3.sh        (needs build/zenflow-run: tools/zf build)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../paths.sh"
out="${OUT:-$here/out}"
steps="${STEPS:-20}"
bin="$root/build/zenflow-run"
[ -x "$bin" ] || { echo "stage3.sh: $bin missing (tools/zf build)" >&2; exit 1; }
mpirun=$(command -v mpirun) || { echo "stage3.sh: mpirun not found (openmpi-bin)" >&2; exit 1; }
[ "$(id -u)" -ne 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out/stage3"
export STARPU_HOME="$out/starpu-home" STARPU_SILENT=1
start=$(date +%s)
# zenflow (the issue-29 settings: topk 0.1, update_interval 2, a selection every 4 steps): the
# owners update the selected columns in their shards (docs/zenflow.md, "ZeRO stage 3")
ZENFLOW=(--set zenflow.topk_ratio=0.1 --set zenflow.update_interval=2 --set 'zenflow.select_strategy="step"'
  --set zenflow.select_interval=4)
for s in zero-offload zenflow; do
  extra=()
  prefix=""
  [ "$s" = zenflow ] && extra=("${ZENFLOW[@]}") && prefix="zenflow."
  for r in 2 4; do
    for st in 2 3; do
      echo "$s, $r ranks, stage $st"
      "$mpirun" --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np "$r" -x STARPU_HOME -x STARPU_SILENT bash -c \
        'export STARPU_HOME="$STARPU_HOME/rank-${OMPI_COMM_WORLD_RANK:-0}"; mkdir -p "$STARPU_HOME"; exec "$@"' \
        rank "$bin" "$root/graphs/specs/mlp-fashion.json" --strategy "$s" "${extra[@]}" --steps "$steps" \
        --set 'model.hidden=[1024,1024,1024,1024,1024,1024,1024,1024]' --set data.train_limit=2048 \
        --set data.eval_limit=100 --set train.batch_size=8 --set log.every=0 --set log.warmup_steps=5 \
        --set runtime.tile_elems=65536 --set runtime.device_workers=1 --set runtime.host_workers=1 \
        --set "zero_optimization.stage=$st" -q --metrics "$out/stage3/${prefix}r$r.s$st.json" \
        --save "$out/stage3/${prefix}r$r.s$st.safetensors"
    done
  done
done
echo "stage 3 runs took $(( $(date +%s) - start )) s" | tee "$out/stage3/time.txt"
/usr/bin/python3 "$here/stage3_report.py" "$out"
# the weights are compared by stage3_report.py, then dropped (32 MB each)
rm -f "$out"/stage3/*.safetensors
