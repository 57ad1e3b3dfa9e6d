#!/usr/bin/env bash
# ZenFlow against no offload at DeepSpeed's default knobs (issue 30, item 3): zenflow (topk 0.1,
# update_interval 4, overlap_step, no warm-up) against device-adam, median step time, in ROUNDS
# interleaved rounds (device-adam then zenflow, same binary, same machine, one after the other), on
#   gpt    graphs/specs/gpt-kjv.json, STEPS_GPT steps (5 warm-up steps excluded by the spec's log)
#   mlp    graphs/specs/mlp-fashion.json with hidden [8192, 512] and batch 2 (a wide MLP, small batch),
#          STEPS_MLP steps
# Writes $OUT/results.csv (case, round, strategy, median and p90 step in ms), summary.md (the
# zenflow / device-adam ratio of each round and the median of the rounds' ratios), every run's
# --trace-csv (traces/$case.$round.$strategy.csv, from step 10 on) and breakdown.md: the
# per-kernel sums of each case's last round side by side (breakdown.py).
#   bash experiments/zenflow-overhead/run.sh      (ROUNDS=3 STEPS_GPT=80 STEPS_MLP=200: about 3 minutes)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$here/out}"
zf_targets=(zenflow-run)  # what common.sh builds
source "$here/../common.sh"
rounds="${ROUNDS:-3}"
zf=(--set zenflow.topk_ratio=0.1 --set zenflow.update_interval=4 --set zenflow.overlap_step=true
  --set zenflow.full_warm_up_rounds=0 --set zenflow.reset_host_moments=false)
mkdir -p "$out/traces"
run_case() {  # case spec steps extra...
  local c=$1 spec=$2 steps=$3 r s
  shift 3
  for r in $(seq "$rounds"); do
    for s in device-adam zenflow; do
      echo "$c, round $r: $s"
      "$root/build/zenflow-run" "$root/$spec" --strategy "$s" --steps "$steps" "$@" "${zf[@]}" \
        --set data.eval_limit=16 -q --metrics "$out/$c.$r.$s.json" --trace-csv "$out/traces/$c.$r.$s.csv" --trace-from 10 \
        >"$out/$c.$r.$s.log" 2>&1
    done
  done
}
echo "run.sh: load $(cut -d' ' -f1-3 /proc/loadavg) at the start"
run_case gpt graphs/specs/gpt-kjv.json "${STEPS_GPT:-80}"
run_case mlp graphs/specs/mlp-fashion.json "${STEPS_MLP:-200}" --set 'model.hidden=[8192,512]' \
  --set train.batch_size=2
$py - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows, lines = [], ["| case | round | device-adam median ms | zenflow median ms | zenflow / device-adam |", "|---|---|---|---|---|"]
for case in ("gpt", "mlp"):
    ratios = []
    for r in range(1, rounds + 1):
        t = {}
        for s in ("device-adam", "zenflow"):
            st = json.load(open("%s/%s.%d.%s.json" % (out, case, r, s)))["step_time_s"]
            t[s] = st["median"] * 1e3
            rows.append("%s,%d,%s,%.3f,%.3f" % (case, r, s, st["median"] * 1e3, st["p90"] * 1e3))
        ratios.append(t["zenflow"] / t["device-adam"])
        lines.append("| %s | %d | %.2f | %.2f | %.3f |" % (case, r, t["device-adam"], t["zenflow"], ratios[-1]))
    lines.append("| %s | median of the rounds | | | **%.3f** |" % (case, statistics.median(ratios)))
open(out + "/results.csv", "w").write("case,round,strategy,median_ms,p90_ms\n" + "\n".join(rows) + "\n")
open(out + "/summary.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
{
  echo "load $(cut -d' ' -f1-3 /proc/loadavg) at the end of the run"
  for c in gpt mlp; do
    $py "$here/breakdown.py" "$out/traces/$c.$rounds.device-adam.csv" "$out/traces/$c.$rounds.zenflow.csv" --title "$c, round $rounds"
    echo
  done
} | tee "$out/breakdown.md"
