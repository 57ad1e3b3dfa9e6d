#!/bin/bash
# A/B of the helper's spin: 20 us (main) against 200 us, interleaved rounds (README, "One core
# against two"). /tmp/zr-20: build/zenflow-run of 29c387e; /tmp/zr-200: the same with kSpinUs = 200.0
# in runtime/sched_deadline.cpp. Writes /tmp/spin/CASE.ROUND.SPIN.json; results.csv has their step medians.
cd /work/main
export STARPU_HOME=/tmp/spin/home STARPU_SILENT=1
mkdir -p $STARPU_HOME
zf=(--set zenflow.topk_ratio=0.1 --set zenflow.update_interval=4 --set zenflow.overlap_step=true
  --set zenflow.full_warm_up_rounds=0 --set zenflow.reset_host_moments=false)
cases=(
 "gpt-da32|graphs/specs/gpt-kjv.json|150|--strategy device-adam"
 "gpt-da16|graphs/specs/gpt-kjv.json|150|--strategy device-adam --set precision=bf16"
 "gpt-zf|graphs/specs/gpt-kjv.json|150|--strategy zenflow"
 "gpt-zo|graphs/specs/gpt-kjv.json|100|--strategy zero-offload"
 "mlp-zf|graphs/specs/mlp-fashion.json|400|--strategy zenflow --set model.hidden=[8192,512] --set train.batch_size=2"
 "mlp-da|graphs/specs/mlp-fashion.json|400|--strategy device-adam --set model.hidden=[8192,512] --set train.batch_size=2"
)
for r in 1 2 3 4 5 6; do
  for c in "${cases[@]}"; do
    IFS='|' read -r name spec steps args <<<"$c"
    for v in 20 200; do
      /tmp/zr-$v $spec --steps $steps $args "${zf[@]}" --set data.eval_limit=16 -q --metrics /tmp/spin/$name.$r.$v.json > /tmp/spin/$name.$r.$v.log 2>&1 || echo "FAIL $name $r $v"
    done
  done
  echo round $r done $(date +%T)
done
