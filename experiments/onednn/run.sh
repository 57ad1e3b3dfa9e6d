#!/usr/bin/env bash
# oneDNN matmuls (issue 30, items 1 and 2), in one run:
#  1. GFLOP/s of one matmul call on one thread at the GPT's shapes (gpt-kjv.json: 1024 rows,
#     width 128, MLP 512, vocabulary 256; the three products of a layer, both weight layouts):
#     OpenBLAS's SGEMM, oneDNN fp32, oneDNN bf16 (tools/bench_matmul.cpp); and the SGEMM
#     yardstick, 2048^3 on 1 and 2 threads, OpenBLAS and oneDNN fp32;
#  2. the GPT step (graphs/specs/gpt-kjv.json, --strategy device-adam, the metrics' median step,
#     warm-up steps excluded) of the binary before the change ($BEFORE, fp32 and bf16) and of this
#     tree's (fp32 and bf16), interleaved over ROUNDS rounds; ratios of the medians over the rounds;
#  3. the GPT step's matmul rate (issue 30: at least 0.6 of oneDNN's own 2-thread fp32 rate at the
#     GPT's shapes): the step's matmul FLOPs over its matmul tasks' time (--trace-csv of this tree's
#     fp32 runs, steps 5 on) against oneDNN's own matmul on 2 threads at the same shapes
#     (bench_matmul --threads 2: one primitive per shape, no tiles of ours), and against twice its
#     1-thread rate (--threads 1), the most 2 threads can do, which a loaded machine's 2-thread
#     measurement (both threads must run at once) can fall far below.
#  4. the ceiling: each precision's step with its matmul tasks replaced by the same FLOPs at twice
#     oneDNN's one-thread rate per call (item 1's table), the rest of the step as measured, against
#     issue 30's two step targets (report.py);
#  5. the step's task time per kernel, fp32 against bf16, before and after (kernels.py, from the
#     --trace-csv of every step run, steps 5 on).
# Writes out/matmul.jsonl (oneDNN's implementation of each call too), out/sgemm.jsonl,
# out/dnnl1.jsonl, out/dnnl2.jsonl, out/steps.jsonl, out/traces/{before-fp32,fp32,before-bf16,bf16}.rN.csv
# and out/summary.md.
#   BEFORE=/path/to/main/build/zenflow-run bash experiments/onednn/run.sh
#   env: ROUNDS (3), GPT_STEPS (30), CALLS (20), OUT (./out), ZF_BUILD_DIR (./build); without
#   BEFORE the before rows are left out (the rest runs as above)
# This tree's build must hold zenflow-run and bench_matmul (cmake --build build --target
# zenflow-run bench_matmul).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${OUT:-$here/out}"
build="${ZF_BUILD_DIR:-$root/build}"
before="${BEFORE:-}"  # a zenflow-run built from the commit before the change; unset: this tree only
rounds="${ROUNDS:-3}" steps="${GPT_STEPS:-30}" calls="${CALLS:-20}"
py=/usr/bin/python3
mkdir -p "$out/traces"
export STARPU_HOME="$out/starpu-home" STARPU_SILENT=1
spec="$root/graphs/specs/gpt-kjv.json"
echo "run.sh: load $(cut -d' ' -f1-3 /proc/loadavg), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(not set)}," \
  "$(grep -m1 'model name' /proc/cpuinfo)"

"$build/bench_matmul" --calls "$calls" --json | tee "$out/matmul.jsonl"
: >"$out/sgemm.jsonl"
for t in 1 2; do "$build/bench_matmul" --sgemm "$t" --json | tee -a "$out/sgemm.jsonl"; done
for t in 1 2; do "$build/bench_matmul" --threads "$t" --calls "$calls" --json | tee "$out/dnnl$t.jsonl"; done

: >"$out/steps.jsonl"
step() {  # ROUND WHAT BINARY PRECISION [--trace-csv FILE --trace-from 5]
  local m="$out/metrics-$2.r$1.json"
  "$3" "$spec" --strategy device-adam --steps "$steps" --set precision="$4" --set log.warmup_steps=5 \
    --set data.eval_limit=32 --metrics "$m" -q "${@:5}"
  $py -c '
import json, sys
m = json.load(open(sys.argv[1]))
print(json.dumps({"round": int(sys.argv[2]), "what": sys.argv[3], "median_s": m["step_time_s"]["median"],
                  "load": float(open("/proc/loadavg").read().split()[0])}))' "$m" "$1" "$2" | tee -a "$out/steps.jsonl"
}
tr() { echo --trace-csv "$out/traces/$1.r$2.csv" --trace-from 5; }
for r in $(seq 1 "$rounds"); do
  [ -z "$before" ] || step "$r" before-fp32 "$before" fp32 $(tr before-fp32 "$r")
  step "$r" after-fp32 "$build/zenflow-run" fp32 $(tr fp32 "$r")
  [ -z "$before" ] || step "$r" before-bf16 "$before" bf16 $(tr before-bf16 "$r")
  step "$r" after-bf16 "$build/zenflow-run" bf16 $(tr bf16 "$r")
done
$py "$here/report.py" "$out" | tee "$out/summary.md"
$py "$here/kernels.py" "$out" | tee -a "$out/summary.md"
