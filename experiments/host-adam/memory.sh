#!/usr/bin/env bash
# Host memory per parameter of each strategy (README.md, "Host memory"): build/zenflow-run on
# graphs/specs/mlp-offload-stall.json with hidden [8192, 512] (10.6 M parameters, 99.9 % of them in
# 2-D weights), 2 steps a run (host_state_bytes is fixed at start-up), fp32 and bf16, zenflow at
# max_staleness 1 and 2 and with semantics "deepspeed" (overlap_step: two host moment sets).
# memory.py writes memory.csv and memory.md (bytes per parameter, and the ratio to zero-offload's
# at the same precision). A few minutes on the shared 2 cores; the numbers do not depend on load.
#   bash experiments/host-adam/memory.sh      env: ZF_BIN (build/zenflow-run), OUT (a temp dir),
#                                             DEST (this folder: where memory.csv and memory.md go)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${ZF_BIN:-$root/build/zenflow-run}"
[ -x "$bin" ] || { echo "memory.sh: $bin not found (cmake --build build --target zenflow-run)" >&2; exit 1; }
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out/runs"
export STARPU_HOME="$out/starpu-home" STARPU_SILENT=1
mkdir -p "$STARPU_HOME"
run() {  # label strategy precision [--set ...]
  local label="$1" strat="$2" prec="$3"
  shift 3
  echo "memory.sh: $label ($prec)"
  "$bin" "$root/graphs/specs/mlp-offload-stall.json" --strategy "$strat" --steps 2 -q \
    --set 'model.hidden=[8192,512]' --set "precision=$prec" --set data.eval_limit=100 --set log.warmup_steps=0 \
    "$@" --metrics "$out/runs/$label.$prec.json"
}
zen=(--set zenflow.topk_ratio=0.1 --set zenflow.update_interval=4 --set zenflow.overlap_step=true)
for prec in fp32 bf16; do
  run device-adam device-adam "$prec"
  run zero-offload zero-offload "$prec"
  run zero-offload-dpu zero-offload-dpu "$prec"
  run zenflow-D1 zenflow "$prec" "${zen[@]}" --set zenflow.max_staleness=1
  run zenflow-D2 zenflow "$prec" "${zen[@]}" --set zenflow.max_staleness=2
  run zenflow-D1-deepspeed zenflow "$prec" "${zen[@]}" --set zenflow.max_staleness=1 --set zenflow.semantics=deepspeed
done
/usr/bin/python3 "$here/memory.py" "$out/runs" "${DEST:-$here}"
