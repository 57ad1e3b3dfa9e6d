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
#   BEFORE=/path/to/old/zenflow-run bash experiments/zenflow-overhead/run.sh   (also the old binary's zenflow)
#   PRECISION=bf16 bash experiments/zenflow-overhead/run.sh   (every run in that precision; default: the specs')
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$here/out}"
zf_targets=(zenflow-run)  # what common.sh builds
source "$here/../common.sh"
rounds="${ROUNDS:-3}"
zf=(--set zenflow.topk_ratio=0.1 --set zenflow.update_interval=4 --set zenflow.overlap_step=true
  --set zenflow.full_warm_up_rounds=0 --set zenflow.reset_host_moments=false)
[ -z "${PRECISION:-}" ] || zf+=(--set "precision=\"$PRECISION\"")
mkdir -p "$out/traces"
# BEFORE=/path/to/zenflow-run (optional): zenflow with that binary too, in each round after the
# other two (rows "zenflow-before"): an engine change's effect measured in the same rounds
before="${BEFORE:-}"
runs=(device-adam zenflow)
[ -z "$before" ] || runs+=(zenflow-before)
run_case() {  # case spec steps extra...
  local c=$1 spec=$2 steps=$3 r s bin
  shift 3
  for r in $(seq "$rounds"); do
    for s in "${runs[@]}"; do
      echo "$c, round $r: $s"
      bin="$root/build/zenflow-run"
      [ "$s" != zenflow-before ] || bin="$before"
      "$bin" "$root/$spec" --strategy "${s%-before}" --steps "$steps" "$@" "${zf[@]}" \
        --set data.eval_limit=16 -q --metrics "$out/$c.$r.$s.json" --trace-csv "$out/traces/$c.$r.$s.csv" \
        --trace-from 10 >"$out/$c.$r.$s.log" 2>&1
    done
  done
}
echo "run.sh: load $(cut -d' ' -f1-3 /proc/loadavg) at the start"
run_case gpt graphs/specs/gpt-kjv.json "${STEPS_GPT:-80}"
run_case mlp graphs/specs/mlp-fashion.json "${STEPS_MLP:-200}" --set 'model.hidden=[8192,512]' \
  --set train.batch_size=2
$py - "$out" "$rounds" "${runs[@]}" <<'PY'
import json, statistics, sys
out, rounds, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
b = "zenflow-before" in runs
rows, lines = [], ["| case | round | device-adam median ms | zenflow median ms | zenflow / device-adam |" +
                   (" before: zenflow median ms | before / device-adam | zenflow / before |" if b else ""),
                   "|---|---|---|---|---|" + ("---|---|---|" if b else "")]
for case in ("gpt", "mlp"):
    ratios, rb, rz = [], [], []
    for r in range(1, rounds + 1):
        t = {}
        for s in runs:
            st = json.load(open("%s/%s.%d.%s.json" % (out, case, r, s)))["step_time_s"]
            t[s] = st["median"] * 1e3
            rows.append("%s,%d,%s,%.3f,%.3f" % (case, r, s, st["median"] * 1e3, st["p90"] * 1e3))
        ratios.append(t["zenflow"] / t["device-adam"])
        extra = ""
        if b:
            rb.append(t["zenflow-before"] / t["device-adam"])
            rz.append(t["zenflow"] / t["zenflow-before"])
            extra = " %.2f | %.3f | %.3f |" % (t["zenflow-before"], rb[-1], rz[-1])
        lines.append("| %s | %d | %.2f | %.2f | %.3f |%s" % (case, r, t["device-adam"], t["zenflow"], ratios[-1], extra))
    lines.append("| %s | median of the rounds | | | **%.3f** |%s" % (
        case, statistics.median(ratios),
        " | **%.3f** | **%.3f** |" % (statistics.median(rb), statistics.median(rz)) if b else ""))
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
