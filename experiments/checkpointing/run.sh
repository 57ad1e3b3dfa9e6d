#!/usr/bin/env bash
# Activation checkpointing (train.activation_checkpointing, docs/spec.md): step time, activation
# buffers and the final weights without it, every layer and every 2 layers, on gpt-kjv.json at 8
# layers and llama-kjv.json (4 blocks), device-adam, fp32 and bf16, the settings interleaved per
# round (these machines are shared: only ratios taken in one run mean something).
#   bash experiments/checkpointing/run.sh        env: ROUNDS (3), STEPS (40; the first 5 excluded)
# Writes out/runs.csv (spec, precision, checkpointing, round, median step ms, activation bytes,
# md5 of the saved weights) and out/summary.md (medians over the rounds, ratios to "none", whether
# the weights are bitwise the same).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$here/out"
zf_targets=(zenflow-run)
source "$here/../common.sh"
rounds=${ROUNDS:-3}
steps=${STEPS:-40}
csv="$out/runs.csv"
echo "spec,precision,checkpointing,round,median_step_ms,activation_bytes,weights_md5" >"$csv"
for r in $(seq "$rounds"); do
  for spec in gpt-kjv llama-kjv; do
    extra=()
    [ "$spec" = gpt-kjv ] && extra=(--set model.n_layer=8)
    for p in fp32 bf16; do
      for ck in none every_layer 2; do
        v="\"$ck\""
        [ "$ck" = 2 ] && v=2
        m="$out/$spec.$p.$ck.$r.json" w="$out/$spec.$p.$ck.$r.safetensors"
        "$root/build/zenflow-run" "$root/graphs/specs/$spec.json" --strategy device-adam "${extra[@]}" \
          --steps "$steps" --set precision="\"$p\"" --set train.activation_checkpointing="$v" \
          --set log.warmup_steps=5 --set data.eval_limit=32 --metrics "$m" --save "$w" -q
        row=$($py -c "import json,sys; m=json.load(open(sys.argv[1]))
print(round(m['step_time_s']['median'] * 1e3, 2), m['device_state_bytes']['activations'], sep=',')" "$m")
        echo "$spec,$p,$ck,$r,$row,$(md5sum <"$w" | cut -c1-16)" | tee -a "$csv"
        rm -f "$w"
      done
    done
  done
done
$py - "$csv" "$out/summary.md" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
lines = ["| spec | precision | checkpointing | step ms (median of rounds) | step / none | activation MiB | activations / none | weights as none's |",
         "|---|---|---|---|---|---|---|---|"]
for spec in dict.fromkeys(r["spec"] for r in rows):
    for p in ("fp32", "bf16"):
        sel = lambda ck: [r for r in rows if (r["spec"], r["precision"], r["checkpointing"]) == (spec, p, ck)]
        base = sel("none")
        b_ms = statistics.median(float(r["median_step_ms"]) for r in base)
        b_act = statistics.median(int(r["activation_bytes"]) for r in base)
        md5 = {r["weights_md5"] for r in base}
        for ck in ("none", "every_layer", "2"):
            s = sel(ck)
            ms = statistics.median(float(r["median_step_ms"]) for r in s)
            act = statistics.median(int(r["activation_bytes"]) for r in s)
            same = "yes" if {r["weights_md5"] for r in s} == md5 and len(md5) == 1 else "NO"
            lines.append(f"| {spec} | {p} | {ck} | {ms:.2f} | {ms / b_ms:.3f} | {act / 2**20:.1f} | {act / b_act:.3f} | {same} |")
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
