#!/usr/bin/env bash
# Gradients that leave the device during the backward (docs/architecture.md, "Gradients in
# flight"): zero-offload on a 12 x 1024 GPT (151 M parameters, gpt-kjv.json's data, 4 x 64 tokens a
# step), fp32 and bf16, in three modes that alternate inside each round (shared machines: only
# ratios taken in one run mean something):
#   whole   runtime.stream_gradients false: every gradient its own buffer, crossed after the backward
#   stream  DeepSpeed's reduce_bucket_size (5e8): crossed during the backward, nothing shared here
#   shared  reduce_bucket_size 1: two slots, the blocks' gradients in two buffers of each kind
# Per run: the step's median, device_state_bytes.grads and the process's peak RSS (/usr/bin/time -v).
# Then --estimate-memory of DeepSpeedExamples' Llama-2-7B fine-tuning setting (the 32-layer config,
# 2 ranks, 4 x 512 tokens each, bf16, stage 2, checkpointing every layer) per strategy, streamed
# and not.
#   bash experiments/grad-stream/run.sh     env: ROUNDS (3), STEPS (10; the first 3 excluded)
# Writes out/runs.csv, out/estimate.csv and out/summary.md (medians over the rounds).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$here/out"
zf_targets=(zenflow-run)
source "$here/../common.sh"
rounds=${ROUNDS:-3}
steps=${STEPS:-10}
bin="$root/build/zenflow-run"
csv="$out/runs.csv"
echo "mode,precision,round,median_step_ms,grads_bytes,peak_rss_kib" >"$csv"
for r in $(seq "$rounds"); do
  for p in fp32 bf16; do
    for mode in whole stream shared; do
      set_mode=(--set runtime.stream_gradients=true)
      [ "$mode" = whole ] && set_mode=(--set runtime.stream_gradients=false)
      [ "$mode" = shared ] && set_mode+=(--set zero_optimization.reduce_bucket_size=1)
      m="$out/$mode.$p.$r.json" tv="$out/$mode.$p.$r.time"
      /usr/bin/time -v -o "$tv" "$bin" "$root/graphs/specs/gpt-kjv.json" --strategy zero-offload --steps "$steps" \
        --set model.n_layer=12 --set model.n_embd=1024 --set model.n_head=16 --set model.context=64 \
        --set train.batch_size=4 --set train.eval_batch_size=4 --set data.eval_limit=4 \
        --set precision="\"$p\"" --set log.warmup_steps=3 "${set_mode[@]}" --metrics "$m" -q
      row=$($py - "$m" "$tv" <<'PY'
import json, re, sys
m = json.load(open(sys.argv[1]))
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(sys.argv[2]).read()).group(1))
print(round(m["step_time_s"]["median"] * 1e3, 1), m["device_state_bytes"]["grads"], rss, sep=",")
PY
)
      echo "$mode,$p,$r,$row" | tee -a "$csv"
    done
  done
done
# the 32-layer Llama-2-7B config: the committed one-block config with num_hidden_layers 32
cfg="$out/llama2-7b"
mkdir -p "$cfg"
$py - "$root/graphs/specs/llama2-7b-block" "$cfg" <<'PY'
import json, shutil, sys
c = json.load(open(sys.argv[1] + "/config.json"))
c["num_hidden_layers"] = 32
json.dump(c, open(sys.argv[2] + "/config.json", "w"), indent=1)
shutil.copy(sys.argv[1] + "/tokenizer.json", sys.argv[2])
PY
est="$out/estimate.csv"
echo "strategy,stream,params,grads,optimizer,activations,attention,total" >"$est"
for s in zenflow zero-offload device-adam; do
  for st in true false; do
    "$bin" "$root/graphs/specs/llama2-7b-block.json" --strategy "$s" --set model.path="\"$cfg\"" \
      --set model.context=512 --set train.batch_size=8 --set train.eval_batch_size=4 \
      --set zero_optimization.stage=2 --set train.activation_checkpointing='"every_layer"' \
      --set runtime.stream_gradients=$st --ranks 2 --estimate-memory >"$out/est.$s.$st.json"
    $py - "$out/est.$s.$st.json" "$s" "$st" >>"$est" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["device"]
print(sys.argv[2], sys.argv[3], *(round(d[k] / 2**30, 2) for k in ("params", "grads", "optimizer", "activations", "attention", "total")), sep=",")
PY
  done
done
cat "$est"
$py - "$csv" "$est" "$out/summary.md" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
med = lambda sel, k: statistics.median(float(r[k]) for r in sel)
lines = ["| precision | mode | step ms | / whole | grads MiB | peak RSS MiB | RSS - whole's MiB |", "|---|---|---|---|---|---|---|"]
for p in ("fp32", "bf16"):
    w = [r for r in rows if (r["mode"], r["precision"]) == ("whole", p)]
    for mode in ("whole", "stream", "shared"):
        sel = [r for r in rows if (r["mode"], r["precision"]) == (mode, p)]
        if not sel or not w:
            continue
        lines.append(f"| {p} | {mode} | {med(sel, 'median_step_ms'):.0f} | {med(sel, 'median_step_ms') / med(w, 'median_step_ms'):.3f} | "
                     f"{med(sel, 'grads_bytes') / 2**20:.0f} | {med(sel, 'peak_rss_kib') / 1024:.0f} | "
                     f"{(med(sel, 'peak_rss_kib') - med(w, 'peak_rss_kib')) / 1024:+.0f} |")
lines += ["", "Llama-2-7B, DeepSpeedExamples' setting, --estimate-memory per rank (GiB):", "",
          "| strategy | streamed | params | grads | optimizer | activations | attention | total |", "|---|---|---|---|---|---|---|---|"]
for r in csv.DictReader(open(sys.argv[2])):
    lines.append("| " + " | ".join(r[k] for k in ("strategy", "stream", "params", "grads", "optimizer", "activations", "attention", "total")) + " |")
open(sys.argv[3], "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
