#!/usr/bin/env bash
# oneDNN matmuls (issue 30, items 1 and 2), in one run:
#  1. GFLOP/s of one matmul call on one thread at the GPT's shapes (gpt-kjv.json: 1024 rows,
#     width 128, MLP 512, vocabulary 256; the three products of a layer, both weight layouts):
#     OpenBLAS's SGEMM, oneDNN fp32, oneDNN bf16 (tools/bench_matmul.cpp); and the SGEMM
#     yardstick, 2048^3 on 1 and 2 threads, OpenBLAS and oneDNN fp32;
#  2. the GPT step (graphs/specs/gpt-kjv.json, --strategy device-adam, the metrics' median step,
#     warm-up steps excluded) of the binary before the change ($BEFORE, fp32 and bf16) and of this
#     tree's (fp32 and bf16), interleaved over ROUNDS rounds; ratios of the medians over the rounds.
# Writes out/matmul.jsonl (oneDNN's implementation of each call too), out/sgemm.jsonl, out/steps.jsonl and out/summary.md.
#   BEFORE=/path/to/main/build/zenflow-run bash experiments/onednn/run.sh
#   env: ROUNDS (3), GPT_STEPS (30), CALLS (20), OUT (./out), ZF_BUILD_DIR (./build)
# This tree's build must hold zenflow-run and bench_matmul (cmake --build build --target
# zenflow-run bench_matmul).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${OUT:-$here/out}"
build="${ZF_BUILD_DIR:-$root/build}"
before="${BEFORE:?set BEFORE to a zenflow-run built from the commit before the change}"
rounds="${ROUNDS:-3}" steps="${GPT_STEPS:-30}" calls="${CALLS:-20}"
py=/usr/bin/python3
mkdir -p "$out"
export STARPU_HOME="$out/starpu-home" STARPU_SILENT=1
spec="$root/graphs/specs/gpt-kjv.json"
echo "run.sh: load $(cut -d' ' -f1-3 /proc/loadavg), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(not set)}," \
  "$(grep -m1 'model name' /proc/cpuinfo)"

"$build/bench_matmul" --calls "$calls" --json | tee "$out/matmul.jsonl"
: >"$out/sgemm.jsonl"
for t in 1 2; do "$build/bench_matmul" --sgemm "$t" --json | tee -a "$out/sgemm.jsonl"; done

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
$py "$here/report.py" "$out" | tee "$out/summary.md"
