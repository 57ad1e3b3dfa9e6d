#!/usr/bin/env bash
# Idle workers and device cores (issue 20): the same binary under
#   lws      StarPU's default policy: idle workers spin (Debian's non-blocking drivers), kernels
#            on one core each
#   zf-1     zf-deadline with one device-side core: 1 device + 2 host workers (more workers than
#            cores, so the host workers do not lend theirs); idle workers sleep
#   zf-all   zf-deadline as the specs run it (the default): every core does device work
# on the GPT of graphs/specs/gpt-kjv.json (device-adam) and on the headline MLP
# (experiments/headline/spec.json, zenflow and zero-offload), interleaved: each repeat runs every
# configuration once, in a fixed order (zf-1 on the GPT only: the headline spec fixes its split by
# pt_reserved_cores_perc). With BASE=path/to/another/zenflow-run (e.g. a build of main), that
# binary runs too, as config "base", under lws (main's default).
# Writes out/results.csv, out/summary.md, out/step_time.png.
# env: REPEATS (3), GPT_STEPS (60), MLP_STEPS (200), BASE (none), OUT (experiments/device-cores/out)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$here/out}"
source "$here/../common.sh"
run="$root/build/zenflow-run"
repeats="${REPEATS:-3}" gpt_steps="${GPT_STEPS:-60}" mlp_steps="${MLP_STEPS:-200}"
gpt="$root/graphs/specs/gpt-kjv.json" mlp="$root/experiments/headline/spec.json"
base="${BASE:-}"
configs=(lws zf-1 zf-all)
[ -z "$base" ] || configs=(base "${configs[@]}")
declare -A sets=(
  [base]="--sched lws"
  [lws]="--sched lws"
  [zf-1]="--sched zf-deadline --set runtime.device_workers=1 --set runtime.host_workers=2"
  [zf-all]="--sched zf-deadline"
)
mkdir -p "$out/raw"
: >"$out/runs.txt"
for r in $(seq 1 "$repeats"); do
  for cfg in "${configs[@]}"; do
    for model in gpt mlp-zenflow mlp-zero-offload; do
      [ "$cfg" != zf-1 ] || [ "$model" = gpt ] || continue
      case $model in
        gpt) args=("$gpt" --strategy device-adam --steps "$gpt_steps" --set log.every=0 --set data.eval_limit=64) ;;
        mlp-zenflow) args=("$mlp" --strategy zenflow --steps "$mlp_steps" --set log.every=0 --set data.eval_limit=100) ;;
        mlp-zero-offload) args=("$mlp" --strategy zero-offload --steps "$mlp_steps" --set log.every=0 --set data.eval_limit=100) ;;
      esac
      m="$out/raw/$model-$cfg-$r.json"
      # shellcheck disable=SC2086
      bin="$run"
      [ "$cfg" != base ] || bin="$base"
      "$bin" "${args[@]}" ${sets[$cfg]} -q --metrics "$m"
      echo "$r $cfg $model $(cut -d' ' -f1 /proc/loadavg) $m" >>"$out/runs.txt"
      echo "repeat $r $cfg $model done (load $(cut -d' ' -f1 /proc/loadavg))"
    done
  done
done
"$py" "$here/report.py" "$out"
cat "$out/summary.md"
