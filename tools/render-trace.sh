#!/usr/bin/env bash
# Renders a Paje trace to PNG headless with ViTE (QT_QPA_PLATFORM=offscreen, then rsvg-convert),
# after checking it with pajeng's pj_dump.
#   bash tools/render-trace.sh run.paje run.png
# Without a trace argument it first records one: 60 steps of the batch-8 headline spec under zenflow,
# steps 20-59 kept (after warm-up), into docs/img/zenflow-trace.{paje,png}.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
command -v vite >/dev/null && command -v rsvg-convert >/dev/null || bash "$root/tools/zf" setup-render
if [ $# -ge 2 ]; then
  paje="$1"
  png="$2"
else
  bash "$root/tools/zf" build >/dev/null
  mkdir -p "$root/docs/img"
  paje="$root/docs/img/zenflow-trace.paje"
  png="$root/docs/img/zenflow-trace.png"
  STARPU_HOME="${STARPU_HOME:-$root/build/starpu-home}" STARPU_SILENT=1 \
    "$root/build/zenflow-run" "$root/experiments/headline/spec-batch8.json" --steps 60 --set log.every=0 \
    --set data.eval_limit=1000 --trace "$paje" --trace-from 20 -q
fi
pj_dump "$paje" >/dev/null
svg="$(mktemp --suffix=.svg)"
QT_QPA_PLATFORM=offscreen vite "$paje" -e "$svg" >/dev/null 2>&1
rsvg-convert -w 1600 "$svg" -o "$png"
rm -f "$svg"
echo "wrote $png (from $paje)"
