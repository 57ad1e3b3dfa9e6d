#!/bin/bash
# A/B of the helper's spin window (README, "One core against two"): main (9950636), whose idle
# worker spins 20 us from entering pop, so that after running tiles it sleeps at once, against
# the same build with the window restarted after each call's tiles (in runtime/sched_deadline.cpp's
# pop: `if (help(me)) { spin_end = starpu_timing_now() + kSpinUs; continue; }`, both places).
# /tmp/zr-main: build/zenflow-run of 9950636; /tmp/zr-spinfix: with that edit. Writes
# /tmp/sf/CASE.ROUND.VARIANT.json; results.csv has their step medians, cpu_over_wall and the
# helpers' share of the tiles.
cd /work/main
export STARPU_HOME=/tmp/sf/home STARPU_SILENT=1
mkdir -p $STARPU_HOME
zf=(--set zenflow.topk_ratio=0.1 --set zenflow.update_interval=4 --set zenflow.overlap_step=true
  --set zenflow.full_warm_up_rounds=0 --set zenflow.reset_host_moments=false)
cases=(
 "gpt-da32|graphs/specs/gpt-kjv.json|100|--strategy device-adam"
 "gpt-da16|graphs/specs/gpt-kjv.json|100|--strategy device-adam --set precision=bf16"
 "gpt-zf|graphs/specs/gpt-kjv.json|100|--strategy zenflow"
 "mlp-zf|graphs/specs/mlp-fashion.json|300|--strategy zenflow --set model.hidden=[8192,512] --set train.batch_size=2"
 "mlp-da|graphs/specs/mlp-fashion.json|300|--strategy device-adam --set model.hidden=[8192,512] --set train.batch_size=2"
)
for r in $(seq 1 ${ROUNDS:-6}); do
  for c in "${cases[@]}"; do
    IFS='|' read -r name spec steps args <<<"$c"
    for v in main spinfix; do
      /tmp/zr-$v $spec --steps $steps $args "${zf[@]}" --set data.eval_limit=16 --set log.warmup_steps=5 -q --metrics /tmp/sf/$name.$r.$v.json > /tmp/sf/$name.$r.$v.log 2>&1 || echo "FAIL $name $r $v"
    done
  done
  echo round $r done $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)
done
echo ALLDONE
