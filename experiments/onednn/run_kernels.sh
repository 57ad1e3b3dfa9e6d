#!/usr/bin/env bash
# The attention on oneDNN and the other device kernels against oneDNN's primitives (issue 30, item 1's
# last part), in one run:
#  1. tools/bench_kernels.cpp (one thread, medians, interleaved): the attention's six products on
#     OpenBLAS and oneDNN (per head, batched over a sequence's heads, fp32 and bf16), the attention
#     kernel in fp32 and bf16, and our LayerNorm, softmax and GELU against oneDNN's primitives at
#     the GPT's shapes;
#  2. the GPT step (graphs/specs/gpt-kjv.json, --strategy device-adam, the metrics' median step,
#     warm-up steps excluded) of the binary before the change ($BEFORE) and of this tree's, fp32 and
#     bf16, interleaved over ROUNDS rounds; ratios of the medians over the rounds.
# Writes OUT/kernels.txt, OUT/steps.jsonl and OUT/summary.md.
#   BEFORE=/path/to/zenflow-run bash experiments/onednn/run_kernels.sh
#   env: ROUNDS (3), GPT_STEPS (30), CALLS (20), OUT (./out-kernels), ZF_BUILD_DIR (./build)
# This tree's build must hold zenflow-run and bench_kernels.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../paths.sh"
out="${OUT:-$here/out-kernels}"
build="${ZF_BUILD_DIR:-$root/build}"
before="${BEFORE:?set BEFORE to a zenflow-run built from the commit before the change}"
rounds="${ROUNDS:-3}" steps="${GPT_STEPS:-30}" calls="${CALLS:-20}"
py=/usr/bin/python3
mkdir -p "$out"
export STARPU_HOME="$out/starpu-home" STARPU_SILENT=1
spec="$root/graphs/specs/gpt-kjv.json"
echo "run_kernels.sh: load $(cut -d' ' -f1-3 /proc/loadavg), $(grep -m1 'model name' /proc/cpuinfo)" | tee "$out/kernels.txt"
"$build/bench_kernels" --calls "$calls" | tee -a "$out/kernels.txt"

: >"$out/steps.jsonl"
step() {  # ROUND WHAT BINARY PRECISION
  local m="$out/metrics-$2.r$1.json"
  "$3" "$spec" --strategy device-adam --steps "$steps" --set precision="$4" --set log.warmup_steps=5 \
    --set data.eval_limit=32 --metrics "$m" -q
  $py -c '
import json, sys
m = json.load(open(sys.argv[1]))
print(json.dumps({"round": int(sys.argv[2]), "what": sys.argv[3], "median_s": m["step_time_s"]["median"],
                  "load": float(open("/proc/loadavg").read().split()[0])}))' "$m" "$1" "$2" | tee -a "$out/steps.jsonl"
}
for r in $(seq 1 "$rounds"); do
  step "$r" before-fp32 "$before" fp32
  step "$r" after-fp32 "$build/zenflow-run" fp32
  step "$r" before-bf16 "$before" bf16
  step "$r" after-bf16 "$build/zenflow-run" bf16
done
$py - "$out" <<'PY' | tee "$out/summary.md"
import json, statistics, sys
steps = [json.loads(l) for l in open(f"{sys.argv[1]}/steps.jsonl")]
med = {}
for w in ["before-fp32", "after-fp32", "before-bf16", "after-bf16"]:
    v = [s["median_s"] for s in steps if s["what"] == w]
    med[w] = statistics.median(v)
    print(f"- {w}: median {1e3 * med[w]:.2f} ms (rounds: {', '.join('%.2f' % (1e3 * x) for x in v)})")
for w in ["fp32", "bf16"]:
    per_round = [b["median_s"] / a["median_s"] for b in steps for a in steps
                 if b["what"] == f"before-{w}" and a["what"] == f"after-{w}" and a["round"] == b["round"]]
    print(f"- before / after, {w}: {med['before-' + w] / med['after-' + w]:.3f}x "
          f"(per round: {', '.join('%.3f' % x for x in per_round)})")
print(f"- after-fp32 / after-bf16: {med['after-fp32'] / med['after-bf16']:.3f}x")
print(f"- load during the steps: {min(s['load'] for s in steps):.2f}-{max(s['load'] for s in steps):.2f}")
PY
