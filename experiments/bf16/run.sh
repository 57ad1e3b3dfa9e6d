#!/usr/bin/env bash
# precision bf16 against fp32 (docs/spec.md, "precision"): the same spec, strategy and steps in
# both precisions; prints final loss/accuracy and the bytes that cross per step, and writes
# out/results.csv and out/table.md (per-run logs and metrics in out/runs/). Losses and accuracies
# are deterministic (no timing here).
#   bash experiments/bf16/run.sh        env: SPECS (default: the MLP on Fashion-MNIST, 1500 steps,
#                                       and the short GPT pretraining on the KJV, 800 steps)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$here/out"
source "$here/../common.sh"
run="$root/build/zenflow-run"
specs=(${SPECS:-mlp-fashion gpt-kjv-short})
mkdir -p "$out/runs"

for spec in "${specs[@]}"; do
  extra=()
  # the MLP spec trains 8 epochs; 1500 steps (3.2 epochs) keep the whole experiment near 10 minutes
  [ "$spec" = mlp-fashion ] && extra=(--steps 1500)
  # gpt-kjv-short's warm-up covers all 800 steps; ZenFlow's selective phase starts at 400 here
  [ "$spec" = gpt-kjv-short ] && extra=(--set zenflow.full_warm_up_rounds=400)
  for strategy in device-adam zero-offload zenflow; do
    for precision in fp32 bf16; do
      m="$out/runs/$spec.$strategy.$precision.json"
      echo "bf16: $spec $strategy $precision"
      "$run" "$root/graphs/specs/$spec.json" --strategy "$strategy" --set precision="$precision" \
        --set log.every=0 "${extra[@]}" --metrics "$m" >"$out/runs/$spec.$strategy.$precision.log"
    done
  done
done

$py - "$out" "${specs[@]}" <<'PY'
import json, sys, os
out, specs = sys.argv[1], sys.argv[2:]
rows = []
for spec in specs:
    for strategy in ("device-adam", "zero-offload", "zenflow"):
        for precision in ("fp32", "bf16"):
            m = json.load(open(os.path.join(out, "runs", f"{spec}.{strategy}.{precision}.json")))
            f = m["final"]
            rows.append((spec, strategy, precision, m["steps"], f["eval_loss"], 100 * f["eval_accuracy"],
                         m["bytes"]["device_to_host"], m["bytes"]["host_to_device"]))
head = "| spec | strategy | precision | steps | eval loss | eval accuracy (%) | bytes/step d2h | bytes/step h2d |"
lines = [head, "|" + "---|" * 8]
for r in rows:
    lines.append(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:.4f} | {r[5]:.2f} | {r[6]:.0f} | {r[7]:.0f} |")
table = "\n".join(lines) + "\n"
open(os.path.join(out, "table.md"), "w").write(table)
with open(os.path.join(out, "results.csv"), "w") as f:
    f.write("spec,strategy,precision,steps,eval_loss,eval_accuracy_pct,bytes_d2h,bytes_h2d\n")
    for r in rows:
        f.write(",".join(str(x) for x in r) + "\n")
print(table, end="")
PY
