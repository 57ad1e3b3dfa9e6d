#!/usr/bin/env bash
# Headline: the same spec under device-adam, zero-offload, zero-offload-dpu and zenflow, in one go
# (and DeepSpeed's Twin-Flow and zenflow at topk 0.1 as extra rows).
# Prints the table, writes results.csv, headline.png and summary.md into $OUT (default: ./out).
#   bash experiments/headline/run.sh [extra zenflow-run args, e.g. --steps 500]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$here/out}"
source "$here/../common.sh"
for s in device-adam zero-offload zero-offload-dpu zenflow; do
  echo "== $s"
  "$root/build/zenflow-run" "$here/spec.json" --strategy "$s" --metrics "$out/$s.json" "$@" | tail -n 12
done
# the same zenflow with ten times the columns on the device (the value the accuracy tests use):
# an extra row, not part of the checks
echo "== zenflow, topk_ratio 0.1"
"$root/build/zenflow-run" "$here/spec.json" --strategy zenflow --set zenflow.topk_ratio=0.1 \
  --metrics "$out/zenflow-topk0.1.json" "$@" | tail -n 12
# DeepSpeed's Twin-Flow (docs/spec.md): zero-offload with the first of the four one-parameter
# sub-groups (sub_group_size 0), the 16384 x 784 first layer, on the device (ratio 0.75:
# int(0.25 x 4) = 1 sub-group there); not part of the checks
echo "== twin-flow, ratio 0.75, sub_group_size 0"
"$root/build/zenflow-run" "$here/spec.json" --strategy zero-offload --set zero_optimization.offload_optimizer.ratio=0.75 \
  --set zero_optimization.sub_group_size=0 --metrics "$out/twin-flow.json" "$@" | tail -n 12
$py "$here/report.py" "$out" device-adam zero-offload zero-offload-dpu zenflow zenflow-topk0.1 twin-flow
