#!/usr/bin/env bash
# Predictions (docs/simulation.md, experiments/simulation/README.md), on the simulated GPU machines,
# under device-adam, zero-offload and zenflow (DeepSpeed's knobs: topk 0.1, interval 4, past the
# warm-up rounds). Parts (default: all of them):
#   gpt    a 1.2B-parameter GPT (gpt-kjv.json's model at 24 x 2048, 16 heads, batch 16 x 64 tokens), one
#          GPU driven by one process: pred-MACHINE-STRATEGY.json, predictions.md
#   llama  Llama-2-7B's shapes: graphs/specs/llama2-7b-block.json (2 blocks) and the whole 32-layer
#          model (llama2-7b/config.json), on a100-40g-pcie4-x4 and h200-pcie5-x1: llama-*.json,
#          llama.md
#   sweep  llama2-7b-block.json (2 blocks), zero-offload and zenflow on h200-pcie5-x1 with its PCIe bandwidth
#          (8/16/32/64 GB/s per direction) and host memory bandwidth (50/100/200 GB/s) varied:
#          machine files machines/*.json, sweep-*.json, sweep.md
#   gpt2xl a GPT-2-1.5B-sized GPT (issue 28 item 6): the engine's GPT at GPT-2 XL's shapes (48 layers,
#          1600 wide, 25 heads, vocab 50257, the LM head untied: 1.64B parameters), context 128,
#          batch 8, fp32, on h200-pcie5-x1 and a100-40g-pcie4-x4 (one process, one GPU):
#          gpt2xl-*.json, gpt2xl.md
#   dse    DeepSpeedExamples' ZenFlow fine-tuning setting (issue 44): the 32-layer Llama-2-7B on
#          a100-40g-pcie4-x2, 2 ranks (each simulated as rank 0), ZeRO stage 2, bf16, 4 sequences
#          of 512 per rank, activation checkpointing every layer, topk 0.1, update_interval 4:
#          --estimate-memory per rank for device-adam, zero-offload, Twin-Flow (offload_optimizer
#          ratio 0.5) and zenflow, and the simulated run of each that fits: dse-*.json, dse.md
#   dgx    the same setting on a DGX A100 (dgx-a100-40g: NVSwitch, two EPYC 7742, a PCIe uplink per GPU
#          pair; issue 47): Llama-2-7B, Qwen2.5-1.5B and Qwen2.5-3B (their published shapes:
#          llama2-7b/, qwen2.5-1.5b/, qwen2.5-3b/), device-adam at ZeRO 2 (no offload), zero-offload and
#          zenflow, 51 steps (steps 5-51 measured), where the estimate fits: dgx-*.json, dgx.md
#   bash experiments/simulation/predict.sh [gpt] [llama] [sweep] [gpt2xl] [dse] [dgx]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${OUT:-$here/out}"
mkdir -p "$out"
parts=("$@")
((${#parts[@]})) || parts=(gpt llama sweep gpt2xl dse dgx)
want() { local p; for p in "${parts[@]}"; do [ "$p" = "$1" ] && return 0; done; return 1; }

# fits NAME SPEC OPTIONS...: the run's memory estimate into $out/NAME-estimate.json (the JSON after
# tools/zf's own lines, exit code and message in NAME-estimate.log); true where its device part fits
fits() {
  local o=$1 rc=0
  shift
  nice -n 19 bash "$root/tools/zf" simulate "$@" --estimate-memory >"$out/$o-estimate.out" 2>"$out/$o-estimate.log" ||
    rc=$?
  sed -n '/^{/,$p' "$out/$o-estimate.out" >"$out/$o-estimate.json"
  if [ "$rc" != 0 ] || ! python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["device_fits"] else 1)' \
      "$out/$o-estimate.json"; then
    echo "$o: not run (estimate exit $rc, or the device part does not fit)"
    return 1
  fi
}

if want gpt; then
machines=(h200-pcie5-x1 a100-40g-pcie4-x4)
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
fi

# ---- Llama-2-7B's shapes. Every run: 10 steps, 2 left out (8 measured: two of zenflow's update
# intervals), host tiles of 16M elements (runtime.tile_elems: StarPU's allocator scans its chunk
# lists linearly on every GPU allocation, and 1M-element tiles made the whole model's simulation
# take many minutes of wall time per step; docs/simulation.md), the spec's per-GPU batch (2 x 128
# tokens). On the 4-A100 machine the whole model runs as rank 0 of 4 at ZeRO stage 3 (a global
# batch of 8): its 8 bytes per parameter of weights and gradients (54 GB) do not fit one 40 GB GPU.
spec="$root/graphs/specs/llama2-7b-block.json"
whole=(--set model.path="$root/experiments/simulation/llama2-7b")
# graphs/specs/llama2-7b-block.json's shapes with 2 blocks (the spec itself has 1 since it runs for
# real on 24 GiB here; these predictions were made with 2)
common=(--set model.path="$root/experiments/simulation/llama2-7b-2blocks" --steps 10 --set log.warmup_steps=2 --set runtime.tile_elems=16777216 -q)
run() {  # OUT.json [simulate arguments]
  local o=$1
  shift
  [ -s "$out/$o" ] && return 0  # done already (delete it to rerun)
  echo "== $o"
  nice -n 19 bash "$root/tools/zf" simulate "$spec" "${common[@]}" "$@" --metrics "$out/$o" >"$out/${o%.json}.log" 2>&1 ||
    { tail -20 "$out/${o%.json}.log"; exit 1; }
}
if want llama; then
for s in device-adam zero-offload zenflow; do
  run "llama-block-h200-pcie5-x1-$s.json" --machine h200-pcie5-x1 --strategy "$s"
  run "llama-block-a100-40g-pcie4-x4-$s.json" --machine a100-40g-pcie4-x4 --strategy "$s"
done
# device-adam on the whole model where its state fits StarPU's 90 % of the GPU's memory with 8 GiB
# left for the activations: the 2-block run's device_state_bytes per parameter (measured) times
# the whole model's parameters (bf16's 2-byte weights and gradients: 16 B per parameter, 100 GiB,
# within the H200's 118 GiB; not an A100's 33.5 GiB)
for m in h200-pcie5-x1 a100-40g-pcie4-x4; do
  python3 - "$out/llama-block-$m-device-adam.json" "$root/graphs/machines/$m.json" <<'PY' &&
import json, sys
b, mach = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
per = b["device_state_bytes"]["total"] / 666914816
sys.exit(0 if per * 6738415616 < 0.9 * mach["gpus"]["memory_bytes"] - 8 * 2**30 else 1)
PY
    run "llama-whole-$m-device-adam.json" --machine "$m" --strategy device-adam "${whole[@]}"
done
for s in zero-offload zenflow; do
  run "llama-whole-h200-pcie5-x1-$s.json" --machine h200-pcie5-x1 --strategy "$s" "${whole[@]}"
  run "llama-whole-a100-40g-pcie4-x4-$s.json" --machine a100-40g-pcie4-x4 --strategy "$s" "${whole[@]}" \
    --ranks 4 --set zero_optimization.stage=3 --set train.batch_size=8
done
python3 - "$out" "$root" <<'PY'
import json, os, sys
out, root = sys.argv[1], sys.argv[2]
mach = {m: json.load(open(os.path.join(root, "graphs/machines", m + ".json"))) for m in ("h200-pcie5-x1", "a100-40g-pcie4-x4")}
def load(k):
    p = os.path.join(out, k + ".json")
    return json.load(open(p)) if os.path.exists(p) else None
rows = ["| model | machine | strategy | step ms mean | step ms median | stall | device busy ms | device state GiB (rank 0) | zenflow / zero-offload (means) |",
        "|---|---|---|---|---|---|---|---|---|"]
for model in ("block", "whole"):
    for m in mach:
        r = {s: load(f"llama-{model}-{m}-{s}") for s in ("device-adam", "zero-offload", "zenflow")}
        up = (r["zero-offload"]["step_time_s"]["mean"] / r["zenflow"]["step_time_s"]["mean"]
              if r["zero-offload"] and r["zenflow"] else None)
        name = "2 blocks (0.67B)" if model == "block" else "32 layers (6.74B)"
        for s, x in r.items():
            where = m + (" (rank 0 of 4, ZeRO 3)" if model == "whole" and m.startswith("a100") and s != "device-adam" else "")
            if x is None:
                # device-adam keeps weights, gradients and AdamW's moments on the GPU: the 2-block run's
                # device_state_bytes per parameter (measured) times the whole model's parameters
                b = load(f"llama-block-{m}-device-adam")
                per = b["device_state_bytes"]["total"] / 666914816
                need = per * 6738415616 / 2**30
                cap = 0.9 * mach[m]["gpus"]["memory_bytes"] / 2**30
                rows.append(f"| {name} | {where} | {s} | does not fit: {per:.0f} B/parameter = {need:.0f} GiB > "
                            f"{cap:.1f} GiB (StarPU's 90 % of {mach[m]['gpus']['memory_bytes'] / 1e9:.0f} GB) | | | | | |")
                continue
            st = x["step_time_s"]
            rows.append(f"| {name} | {where} | {s} | {st['mean'] * 1e3:.0f} | {st['median'] * 1e3:.0f} | {x['stall_fraction']:.3f} | "
                        f"{x['device_busy_s_per_step'] * 1e3:.0f} | {x['device_state_bytes']['total'] / 2**30:.1f} | "
                        f"{f'{up:.2f}x' if s == 'zenflow' and up else ''} |")
text = "\n".join(rows) + "\n"
print(text, end="")
open(os.path.join(out, "llama.md"), "w").write(text)
PY
fi

# ---- The sweep: h200-pcie5-x1 with PCIe (per direction, also the GPU-GPU link through the host) and
# host memory bandwidth replaced; everything else, efficiencies included, as in its machine file.
if want sweep; then
mkdir -p "$out/machines"
pcie=(8 16 32 64)
host=(50 100 200)
for p in "${pcie[@]}"; do
  for h in "${host[@]}"; do
    python3 - "$root/graphs/machines/h200-pcie5-x1.json" "$out/machines/h200-p$p-h$h.json" "$p" "$h" <<'PY'
import json, os, sys
m = json.load(open(sys.argv[1]))
p, h = float(sys.argv[3]) * 1e9, float(sys.argv[4]) * 1e9
m["name"] = f"h200-p{sys.argv[3]}-h{sys.argv[4]}"
m["description"] = f"h200-pcie5-x1 with PCIe {sys.argv[3]} GB/s per direction and host memory {sys.argv[4]} GB/s (predict.sh sweep)"
m["pcie"]["h2d_bandwidth"] = m["pcie"]["d2h_bandwidth"] = m["gpu_links"]["bandwidth"] = p
m["host"]["memory_bandwidth"] = h
tmp = sys.argv[2] + ".tmp"
json.dump(m, open(tmp, "w"), indent=1)
os.replace(tmp, sys.argv[2])
PY
    for s in zero-offload zenflow; do  # the 2-block spec: the whole model's zero-offload took 3 min of wall time per run
      run "sweep-p$p-h$h-$s.json" --machine "$out/machines/h200-p$p-h$h.json" --strategy "$s"
    done
  done
done
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
pcie, host = (8, 16, 32, 64), (50, 100, 200)
def mean(p, h, s):
    return json.load(open(os.path.join(out, f"sweep-p{p}-h{h}-{s}.json")))["step_time_s"]["mean"]
rows = ["| PCIe GB/s (rows), host memory GB/s (columns) | " + " | ".join(f"{h}" for h in host) + " |", "|---|" + "---|" * len(host)]
for p in pcie:
    cells = []
    for h in host:
        z, o = mean(p, h, "zenflow"), mean(p, h, "zero-offload")
        cells.append(f"{o / z:.2f}x ({o * 1e3:.0f} / {z * 1e3:.0f} ms)")
    rows.append(f"| {p} | " + " | ".join(cells) + " |")
text = "\n".join(rows) + "\n"
print(text, end="")
open(os.path.join(out, "sweep.md"), "w").write(text)
PY
fi

# ---- A GPT-2-1.5B-sized GPT: gpt-kjv.json (topk 0.1, interval 4, overlap: DeepSpeed's defaults) with
# the model at GPT-2 XL's shapes. 12 steps, 4 left out (8 measured: two of zenflow's update
# intervals), host tiles of 16M elements as for Llama (above), one process driving one GPU with the
# host's automatic worker split (on the x4 machine the other 3 GPUs idle and the process has the
# whole host). device-adam is run where its state fits StarPU's 90 % of the GPU's memory, else
# reported as not fitting from zero-offload's measured device state and the parameter count.
if want gpt2xl; then
xl=(--set model.n_layer=48 --set model.n_embd=1600 --set model.n_head=25 --set model.vocab=50257
    --set model.context=128 --set train.batch_size=8 --steps 12 --set log.warmup_steps=4
    --set zenflow.full_warm_up_rounds=0 --set runtime.tile_elems=16777216 -q)
for m in h200-pcie5-x1 a100-40g-pcie4-x4; do
  for s in device-adam zero-offload zenflow; do
    o="gpt2xl-$m-$s.json"
    [ -s "$out/$o" ] && continue  # done already (delete it to rerun)
    echo "== $o"
    # device-adam keeps weights, gradients and AdamW's moments on the GPU (measured: 24.4 GiB of state)
    # besides the activations; were it not to fit (StarPU's 90 %: 33.5 GiB of the A100's 40 GB),
    # StarPU would evict and refetch every step, which makes the simulation take minutes per step
    # (docs/simulation.md): 600 s at most
    if [ "$s" = device-adam ]; then
      timeout 600 nice -n 19 bash "$root/tools/zf" simulate "$root/graphs/specs/gpt-kjv.json" --machine "$m" \
        --strategy "$s" "${xl[@]}" --metrics "$out/$o" >"$out/${o%.json}.log" 2>&1 ||
        echo "$m device-adam: did not finish in 600 s (exit $?)" | tee "$out/${o%.json}.timeout"
      continue
    fi
    nice -n 19 bash "$root/tools/zf" simulate "$root/graphs/specs/gpt-kjv.json" --machine "$m" --strategy "$s" \
      "${xl[@]}" --metrics "$out/$o" >"$out/${o%.json}.log" 2>&1 || { tail -20 "$out/${o%.json}.log"; exit 1; }
  done
done
python3 - "$out" "$root" <<'PY'
import json, os, sys
out, root = sys.argv[1], sys.argv[2]
rows = ["| machine | strategy | step ms mean | step ms median | stall | device busy ms | device state GiB | zenflow / zero-offload (means) |",
        "|---|---|---|---|---|---|---|---|"]
for m in ("h200-pcie5-x1", "a100-40g-pcie4-x4"):
    mach = json.load(open(os.path.join(root, "graphs/machines", m + ".json")))
    def load(s):
        p = os.path.join(out, f"gpt2xl-{m}-{s}.json")
        return json.load(open(p)) if os.path.exists(p) else None
    r = {s: load(s) for s in ("device-adam", "zero-offload", "zenflow")}
    up = r["zero-offload"]["step_time_s"]["mean"] / r["zenflow"]["step_time_s"]["mean"]
    for s, x in r.items():
        if x is None:
            # weights 4 + gradients 4 + AdamW's moments 8 + its fp32 step state 4: 20 B per parameter
            # (the 2-block Llama run's device_state_bytes per parameter, experiments/simulation/README.md)
            n = r["zero-offload"]["device_state_bytes"]["params"] / 4
            need = 20 * n / 2**30
            cap = 0.9 * mach["gpus"]["memory_bytes"] / 2**30
            rows.append(f"| {m} | {s} | did not finish in 600 s of simulation: 20 B/parameter x {n / 1e9:.2f}B = "
                        f"{need:.1f} GiB of state + the activations against {cap:.1f} GiB (StarPU's 90 % of "
                        f"{mach['gpus']['memory_bytes'] / 1e9:.0f} GB) | | | | | |")
            continue
        st = x["step_time_s"]
        rows.append(f"| {m} | {s} | {st['mean'] * 1e3:.0f} | {st['median'] * 1e3:.0f} | {x['stall_fraction']:.3f} | "
                    f"{x['device_busy_s_per_step'] * 1e3:.0f} | {x['device_state_bytes']['total'] / 2**30:.1f} | "
                    f"{f'{up:.2f}x' if s == 'zenflow' else ''} |")
text = "\n".join(rows) + "\n"
print(text, end="")
open(os.path.join(out, "gpt2xl.md"), "w").write(text)
PY
fi

# ---- DeepSpeedExamples' setting. The estimate first (exit 2 where the device part is above 90 % of
# the A100's 40 GB: the run would be refused too); the simulated run where it fits, 8 steps, 2 left
# out. Twin-Flow at ZeRO stage 2 on several ranks is refused by the engine (docs/data-parallel.md).
if want dse; then
dse=(--machine a100-40g-pcie4-x2 --ranks 2 --set model.path="$root/experiments/simulation/llama2-7b"
     --set zero_optimization.stage=2 --set model.context=512 --set train.batch_size=8 --set train.eval_batch_size=4
     --set train.activation_checkpointing=1 --set zenflow.topk_ratio=0.1 --set zenflow.update_interval=4
     --set zenflow.full_warm_up_rounds=0 --set runtime.tile_elems=16777216)
for s in device-adam zero-offload twin-flow zenflow; do
  o="dse-$s"
  [ -s "$out/$o.json" ] && continue  # done already (delete it to rerun)
  strat=(--strategy "$s")
  [ "$s" = twin-flow ] && strat=(--strategy zero-offload --set zero_optimization.offload_optimizer.ratio=0.5)
  echo "== $o"
  fits "$o" "$spec" "${dse[@]}" "${strat[@]}" || continue
  # STARPU_BUS_STATS: StarPU's own count of the bytes it moved, evictions and refetches included,
  # printed at the end of the log; the engine's `bytes` count only the crossings it submits. The
  # run again with 16 steps: the 8 more steps' share of StarPU's bytes, against the engine's
  # crossings of 8 steps, leaves out what the start and the end move once
  STARPU_BUS_STATS=1 /usr/bin/time -f "%e" -o "$out/$o.wall" nice -n 19 bash "$root/tools/zf" simulate "$spec" \
    "${dse[@]}" "${strat[@]}" --steps 8 --set log.warmup_steps=2 -q --metrics "$out/$o.json" >"$out/$o.log" 2>&1 ||
    { tail -20 "$out/$o.log"; exit 1; }
  STARPU_BUS_STATS=1 nice -n 19 bash "$root/tools/zf" simulate "$spec" "${dse[@]}" "${strat[@]}" --steps 16 \
    --set log.warmup_steps=2 -q --metrics "$out/$o-16.json" >"$out/$o-16.log" 2>&1 || { tail -20 "$out/$o-16.log"; exit 1; }
done
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
gib = lambda b: f"{b / 2**30:.2f}"
import re
rows = ["| strategy | device estimate GiB per rank (params, grads, optimizer, activations, attention) | fits | step ms mean | step ms median | stall | device busy ms | device state GiB (rank 0) | d2h + h2d GB per step (the engine's crossings) | GB StarPU moved per step (steps 9-16: its bus stats, 16 steps - 8) | wall s (8 steps) |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
for s in ("device-adam", "zero-offload", "twin-flow", "zenflow"):
    est_path = os.path.join(out, f"dse-{s}-estimate.json")
    try:
        e = json.load(open(est_path))
    except (OSError, ValueError):
        err = open(os.path.join(out, f"dse-{s}-estimate.log")).read().strip().splitlines()
        rows.append(f"| {s} | refused: {err[-1] if err else '?'} | | | | | | | | | |")
        continue
    d = e["device"]
    parts = ", ".join(gib(d[k]) for k in ("params", "grads", "optimizer", "activations", "attention"))
    line = f"| {s} | {gib(d['total'])} ({parts}) | {'yes' if e['device_fits'] else 'no'} |"
    p = os.path.join(out, f"dse-{s}.json")
    if not os.path.exists(p):
        rows.append(line + " not run | | | | | | | |")
        continue
    x = json.load(open(p))
    st = x["step_time_s"]
    by = x["bytes"]
    wall = open(os.path.join(out, f"dse-{s}.wall")).read().split()[-1]
    def total(name):
        m = re.search(r"Total transfers: ([0-9.]+) GB", open(os.path.join(out, name)).read())
        return float(m.group(1)) if m else None
    t8, t16 = total(f"dse-{s}.log"), total(f"dse-{s}-16.log")
    moved = f"{(t16 - t8) / 8:.2f} ({t8:.1f} in 8 steps, {t16:.1f} in 16)" if t8 and t16 else "?"
    rows.append(line + f" {st['mean'] * 1e3:.0f} | {st['median'] * 1e3:.0f} | {x['stall_fraction']:.3f} | "
                f"{x['device_busy_s_per_step'] * 1e3:.0f} | {x['device_state_bytes']['total'] / 2**30:.1f} | "
                f"{by['device_to_host'] / 1e9:.2f} + {by['host_to_device'] / 1e9:.2f} | {moved} | {wall} |")
text = "\n".join(rows) + "\n"
print(text, end="")
open(os.path.join(out, "dse.md"), "w").write(text)
PY
fi

# ---- DeepSpeedExamples' setting on a DGX A100 (issue 47 item 5): each model's estimate first, then
# 51 simulated steps (the first 4 left out: the mean and the median over steps 5-51) where it fits.
if want dgx; then
spec="$root/graphs/specs/llama2-7b-block.json"
for model in llama2-7b qwen2.5-1.5b qwen2.5-3b; do
  for s in device-adam zero-offload zenflow; do
    o="dgx-$model-$s"
    [ -s "$out/$o.json" ] && continue  # done already (delete it to rerun)
    args=(--machine dgx-a100-40g --ranks 2 --set model.path="$here/$model" --strategy "$s"
          --set zero_optimization.stage=2 --set model.context=512 --set train.batch_size=8 --set train.eval_batch_size=4
          --set train.activation_checkpointing=1 --set zenflow.topk_ratio=0.1 --set zenflow.update_interval=4
          --set zenflow.full_warm_up_rounds=0 --set runtime.tile_elems=16777216)
    echo "== $o"
    fits "$o" "$spec" "${args[@]}" || continue
    /usr/bin/time -f "%e" -o "$out/$o.wall" nice -n 19 bash "$root/tools/zf" simulate "$spec" "${args[@]}" \
      --steps 51 --set log.warmup_steps=4 -q --metrics "$out/$o.json" >"$out/$o.log" 2>&1 ||
      { tail -20 "$out/$o.log"; exit 1; }
  done
done
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
gib = lambda b: f"{b / 2**30:.1f}"
rows = ["| model | strategy | parameters | device estimate GiB per GPU (fits 90 % of 40 GB) | step ms mean (5-51) | step ms median | stall | device busy ms | d2h + h2d GB per step | collectives ms per step | device state GiB | host workers | wall s (51 steps) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
for model in ("llama2-7b", "qwen2.5-1.5b", "qwen2.5-3b"):
    for s in ("device-adam", "zero-offload", "zenflow"):
        o = os.path.join(out, f"dgx-{model}-{s}")
        try:
            e = json.load(open(o + "-estimate.json"))
        except (OSError, ValueError):
            err = open(o + "-estimate.log").read().strip().splitlines()
            rows.append(f"| {model} | {s} | | refused: {err[-1] if err else '?'} | | | | | | | | | |")
            continue
        line = f"| {model} | {s} | {e['parameters'] / 1e9:.2f}B | {gib(e['device']['total'])} ({'yes' if e['device_fits'] else 'no'}) |"
        if not os.path.exists(o + ".json"):
            rows.append(line + " not run | | | | | | | | |")
            continue
        x = json.load(open(o + ".json"))
        st, by = x["step_time_s"], x["bytes"]
        coll = x.get("data_parallel", {}).get("collective_s_per_step", 0.0)
        wall = open(o + ".wall").read().split()[-1]
        rows.append(line + f" {st['mean'] * 1e3:.0f} | {st['median'] * 1e3:.0f} | {x['stall_fraction']:.3f} | "
                    f"{x['device_busy_s_per_step'] * 1e3:.0f} | {by['device_to_host'] / 1e9:.2f} + {by['host_to_device'] / 1e9:.2f} | "
                    f"{coll * 1e3:.1f} | {gib(x['device_state_bytes']['total'])} | {x['workers']['host']} | {wall} |")
text = "\n".join(rows) + "\n"
print(text, end="")
open(os.path.join(out, "dgx.md"), "w").write(text)
PY
fi
