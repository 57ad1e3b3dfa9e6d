#!/usr/bin/env bash
# Host AdamW at memory speed, side by side: build/bench_host_adam (STREAM triad, our AdamW and the
# fused accumulate+AdamW, one run) then PyTorch's CPU AdamW (compare_torch.py), over the same N fp32
# parameters with THREADS threads, ROUNDS times alternately; then the tile-size sweep once.
# Raw outputs go to raw/; summarize.py writes results.csv, tiles.csv and results.md.
#   bash experiments/host-adam/run.sh   env: ROUNDS (2), N (1e8), THREADS (torch's, 2), ZF_BUILD_DIR,
#                                       MAX_LOAD (1.5) and WAIT_S (900): wait for a quiet machine first
# Debian's python3-torch (about 830 MB installed with its dependencies) is installed here when
# missing; it is deliberately not in tools/zf's package list.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${ZF_BUILD_DIR:-$root/build}"
rounds="${ROUNDS:-2}" n="${N:-1e8}" threads="${THREADS:-2}"
py=/usr/bin/python3  # Debian's interpreter: python3-torch is installed for it

bash "$root/tools/zf" setup-torch  # libbenchmark-dev, python3-torch

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target bench_host_adam -j "$(nproc)"

# The machines are shared: wait (up to WAIT_S seconds) for the 1-minute load to fall below MAX_LOAD.
max_load="${MAX_LOAD:-1.5}" wait_s="${WAIT_S:-900}"
for ((w = 0; w < wait_s; w += 15)); do
  awk -v l="$(cut -d' ' -f1 /proc/loadavg)" -v m="$max_load" 'BEGIN { exit !(l < m) }' && break
  sleep 15
done
echo "run.sh: starting at load $(cut -d' ' -f1-3 /proc/loadavg) (MAX_LOAD $max_load)"

mkdir -p "$here/raw"
rm -f "$here"/raw/*
export ZF_BENCH_N="$n"
for r in $(seq 1 "$rounds"); do
  echo "== round $r: bench_host_adam (load: $(cut -d' ' -f1-3 /proc/loadavg))"
  "$build/bench_host_adam" --benchmark_filter='^(Triad|AdamW|AdamWAccumulate)/' \
    --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true \
    --benchmark_out="$here/raw/bench_r$r.json" --benchmark_out_format=json | tee "$here/raw/bench_r$r.txt"
  echo "== round $r: torch.optim.AdamW (load: $(cut -d' ' -f1-3 /proc/loadavg))"
  "$py" "$here/compare_torch.py" --n "$n" --threads "$threads" | tee "$here/raw/torch_r$r.jsonl"
done
echo "== tile sweep (load: $(cut -d' ' -f1-3 /proc/loadavg))"
"$build/bench_host_adam" --benchmark_filter='^AdamWTiles/' \
  --benchmark_out="$here/raw/tiles.json" --benchmark_out_format=json | tee "$here/raw/tiles.txt"
echo "== done (load: $(cut -d' ' -f1-3 /proc/loadavg))"
"$py" "$here/summarize.py" "$here"
