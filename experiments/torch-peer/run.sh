#!/usr/bin/env bash
# zenflow-run's device-adam step against PyTorch's on the same models, interleaved in one run:
# the GPT of graphs/specs/gpt-kjv.json, the Llama of graphs/specs/llama-kjv.json (peer.py's Llama
# is plain PyTorch) and the MLP of graphs/specs/mlp-fashion.json, in fp32 and
# in bf16 (zenflow-run `precision: "bf16"`; PyTorch's CPU autocast to bf16, peer.py --precision).
# Each round runs, in turn: numpy SGEMM (2048^3) with 1 and 2 OpenBLAS threads, oneDNN's fp32
# matmul at the same size with 1 and 2 threads (build/bench_matmul --sgemm), then for each spec
# and precision zenflow-run (device-adam) and PyTorch (peer.py) under every set-up tried:
# torch.set_num_threads 1 or 2 x OPENBLAS_NUM_THREADS 1 or 2 (Debian's torch calls the system
# OpenBLAS, which only that variable sets) x OpenBLAS's kernels: as the machine sets them, and,
# where OPENBLAS_CORETYPE is not set and the CPU has AVX-512, OPENBLAS_CORETYPE=SkylakeX too
# (Debian 12's OpenBLAS 0.3.21 does not know recent CPUs and falls back to old kernels, which a
# PyTorch user would override). The OpenBLAS environment of the zenflow-run runs is the machine's.
# Writes out/raw.jsonl (every measurement), out/results.csv, out/table.md, out/torch-peer.png and
# out/summary.md (the issue's checks, computed from the medians over the rounds).
#   bash experiments/torch-peer/run.sh    env: ROUNDS (3), GPT_STEPS (60), LLAMA_STEPS (GPT_STEPS),
#                                         MLP_STEPS (300), MODELS ("gpt-kjv llama-kjv mlp-fashion"),
#                                         PRECISIONS ("fp32 bf16"), the set-ups tried:
#                                         OMP_TRIED ("1 2"), BLAS_TRIED ("1 2"), CORETYPES
#                                         ("machine", plus SkylakeX as above; a name is an
#                                         OPENBLAS_CORETYPE, "machine" leaves it as it is),
#                                         MAX_LOAD (1.5) and WAIT_S (600): wait for a quiet machine
#                                         first; OUT (default: ./out); ZF_BUILD_DIR
# Debian's python3-torch (about 830 MB installed with its dependencies) is installed here when
# missing; it is deliberately not in tools/zf's package list. The engine's build needs the
# targets zenflow-run and bench_matmul (common.sh builds them).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$here/out}"
zf_targets=(zenflow-run bench_matmul)  # what common.sh builds
source "$here/../common.sh"
build="${ZF_BUILD_DIR:-$root/build}"
rounds="${ROUNDS:-3}" gpt_steps="${GPT_STEPS:-60}" mlp_steps="${MLP_STEPS:-300}"
llama_steps="${LLAMA_STEPS:-$gpt_steps}" models="${MODELS:-gpt-kjv llama-kjv mlp-fashion}"
precisions="${PRECISIONS:-fp32 bf16}"
# OpenBLAS kernel choices for PyTorch: the machine's, and SkylakeX where the machine sets none
coretypes=(machine)
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512f /proc/cpuinfo; then coretypes+=(SkylakeX); fi
[ -z "${CORETYPES:-}" ] || read -r -a coretypes <<<"$CORETYPES"
omp_tried="${OMP_TRIED:-1 2}" blas_tried="${BLAS_TRIED:-1 2}"

bash "$root/tools/zf" setup-torch  # python3-torch

max_load="${MAX_LOAD:-1.5}" wait_s="${WAIT_S:-600}"
for ((w = 0; w < wait_s; w += 15)); do
  awk -v l="$(cut -d' ' -f1 /proc/loadavg)" -v m="$max_load" 'BEGIN { exit !(l < m) }' && break
  sleep 15
done
echo "run.sh: starting at load $(cut -d' ' -f1-3 /proc/loadavg) (MAX_LOAD $max_load)," \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(not set)} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-(not set)}"

raw="$out/raw.jsonl"
: >"$raw"
load() { cut -d' ' -f1 /proc/loadavg; }
# record ROUND WHAT JSON: one line of raw.jsonl
record() {
  $py -c '
import json, sys
d = json.loads(sys.argv[3])
d.update(round=int(sys.argv[1]), what=sys.argv[2], load=float(sys.argv[4]))
print(json.dumps(d))
v = "%.0f GFLOP/s" % d["gflops_median"] if "gflops_median" in d else "%.2f ms" % (1e3 * d["median_s"])
print("  %-32s %14s   load %.2f" % (d["what"], v, d["load"]), file=sys.stderr)' "$1" "$2" "$3" "$(load)" >>"$raw"
}

engine() {  # ROUND SPEC STEPS PRECISION
  local name m
  name="$(basename "$2" .json)"
  m="$out/engine-$name-$4.r$1.json"
  "$build/zenflow-run" "$2" --strategy device-adam --steps "$3" --set log.warmup_steps=10 \
    --set data.eval_limit=32 --set precision="$4" --metrics "$m" -q
  record "$1" "zenflow:$name:$4" "$($py -c '
import json, sys
m = json.load(open(sys.argv[1]))
d = {"median_s": m["step_time_s"]["median"], "mean_s": m["step_time_s"]["mean"], "workers": m.get("workers")}
for k in ("cpu_seconds", "cpu_over_wall", "device_cores"):
    if k in m: d[k] = m[k]
print(json.dumps(d))' "$m")"
}

peer() {  # ROUND SPEC STEPS PRECISION OMP BLAS CORETYPE
  local name ct=()
  name="$(basename "$2" .json)"
  [ "$7" = machine ] || ct=(OPENBLAS_CORETYPE="$7")
  record "$1" "torch:$name:$4:omp$5:blas$6:$7" \
    "$(env "${ct[@]}" OMP_NUM_THREADS="$5" OPENBLAS_NUM_THREADS="$6" $py "$here/peer.py" \
      "$root/graphs/specs/$name.json" --threads "$5" --steps "$3" --precision "$4")"
}

for r in $(seq 1 "$rounds"); do
  echo "== round $r of $rounds (load $(load))"
  for t in 1 2; do record "$r" "sgemm:blas$t" "$(OPENBLAS_NUM_THREADS=$t $py "$here/sgemm.py")"; done
  # oneDNN's fp32 matmul at the same size (tools/bench_matmul.cpp), the device matmuls' library
  for t in 1 2; do
    record "$r" "sgemm:onednn$t" "$("$build/bench_matmul" --sgemm "$t" --json | $py -c '
import json, sys
d = json.load(sys.stdin)
print(json.dumps({"gflops_median": d["onednn_f32"], "impl": d["impl"]}))')"
  done
  for name in $models; do
    case "$name" in gpt-kjv) steps=$gpt_steps ;; llama-kjv) steps=$llama_steps ;; *) steps=$mlp_steps ;; esac
    for prec in $precisions; do
      engine "$r" "$root/graphs/specs/$name.json" "$steps" "$prec"
      for ct in "${coretypes[@]}"; do
        for omp in $omp_tried; do
          for blas in $blas_tried; do peer "$r" "$name" "$steps" "$prec" "$omp" "$blas" "$ct"; done
        done
      done
    done
  done
done
echo "== done (load $(load))"
$py "$here/report.py" "$out"
