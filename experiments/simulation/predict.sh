#!/usr/bin/env bash
# Predictions (docs/simulation.md): a 1.2B-parameter GPT (gpt-kjv.json's model at 24 x 2048, 16
# heads, batch 16 x 64 tokens) on the simulated GPU machines, one GPU driven by one process, under
# device-adam, zero-offload and zenflow (DeepSpeed's knobs of gpt-kjv.json: topk 0.1, interval 4,
# past the warm-up rounds). Writes pred-MACHINE-STRATEGY.json and predictions.md into $OUT.
#   bash experiments/simulation/predict.sh [machines...]   default: h200-pcie5-x1 a100-40g-pcie4-x4
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${OUT:-$here/out}"
mkdir -p "$out"
machines=("$@")
((${#machines[@]})) || machines=(h200-pcie5-x1 a100-40g-pcie4-x4)
model=(--set model.n_layer=24 --set model.n_embd=2048 --set model.n_head=16)
for m in "${machines[@]}"; do
  for s in device-adam zero-offload zenflow; do
    echo "== $m $s"
    bash "$root/tools/zf" simulate "$root/graphs/specs/gpt-kjv.json" --machine "$m" --strategy "$s" "${model[@]}" \
      --steps 12 --set log.warmup_steps=4 --set zenflow.full_warm_up_rounds=0 -q \
      --metrics "$out/pred-$m-$s.json" >"$out/pred-$m-$s.log" 2>&1 || { tail -20 "$out/pred-$m-$s.log"; exit 1; }
  done
done
python3 - "$out" "${machines[@]}" <<'PY'
import json, os, sys
out, machines = sys.argv[1], sys.argv[2:]
rows = ["| machine | strategy | step ms median | step ms mean | stall | device busy ms | zenflow speed-up over zero-offload (means) |",
        "|---|---|---|---|---|---|---|"]
for m in machines:
    r = {s: json.load(open(os.path.join(out, f"pred-{m}-{s}.json"))) for s in ("device-adam", "zero-offload", "zenflow")}
    up = r["zero-offload"]["step_time_s"]["mean"] / r["zenflow"]["step_time_s"]["mean"]
    for s, x in r.items():
        rows.append(f"| {m} | {s} | {x['step_time_s']['median'] * 1e3:.1f} | {x['step_time_s']['mean'] * 1e3:.1f} | "
                    f"{x['stall_fraction']:.3f} | "
                    f"{x['device_busy_s_per_step'] * 1e3:.1f} | {f'{up:.2f}x' if s == 'zenflow' else ''} |")
text = "\n".join(rows) + "\n"
print(text, end="")
open(os.path.join(out, "predictions.md"), "w").write(text)
PY
