#!/usr/bin/env bash
# The memory of a simulated run (issue 28: "no more than a few hundred MB for a 7B-parameter
# model"; docs/simulation.md, "What changes in the simulation build"): runs `tools/zf simulate`
# with the given arguments and samples the simulation process's proportional set size
# (/proc/PID/smaps_rollup, Pss: a folded page shared by many mappings counts once; the RSS counts
# it once per mapping) every 0.5 s; prints the largest, the largest RSS and the wall time.
# Default: the whole Llama-2-7B (llama2-7b/config.json, 6.74B parameters) under zenflow on
# h200-pcie5-x1, predict.sh's options.
#   bash experiments/simulation/memory.sh [SPEC.json --machine NAME [zenflow-run options]]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
args=("$@")
((${#args[@]})) || args=("$root/graphs/specs/llama2-7b-block.json" --machine h200-pcie5-x1 --strategy zenflow
  --set model.path="$root/experiments/simulation/llama2-7b" --steps 10 --set log.warmup_steps=2
  --set runtime.tile_elems=16777216 -q)
log=$(mktemp "${TMPDIR:-/tmp}/zf_memory_XXXXXX")
trap 'rm -f "$log"' EXIT
start=$(date +%s.%N)
bash "$root/tools/zf" simulate "${args[@]}" >"$log" 2>&1 &
runner=$!
pss=0 rss=0
while kill -0 "$runner" 2>/dev/null; do
  # tools/zf execs zenflow-run-sim: the runner's process is the simulation's
  read -r a b < <(awk '/^Pss:/{p=$2} /^Rss:/{r=$2} END{print p+0, r+0}' "/proc/$runner/smaps_rollup" 2>/dev/null ||
    echo "0 0")
  ((a > pss)) && pss=$a
  ((b > rss)) && rss=$b
  sleep 0.5
done
rc=0
wait "$runner" || rc=$?
wall=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.0f}')" "$start" "$(date +%s.%N)")
if ((rc != 0)); then tail -20 "$log"; echo "memory: the simulation exited $rc" >&2; exit "$rc"; fi
grep -E "^zf .*simulate:" "$log" | head -1 || true
echo "memory: largest proportional set size $((pss / 1024)) MiB (RSS $((rss / 1024)) MiB: folded pages once per mapping), $wall s of wall time"
