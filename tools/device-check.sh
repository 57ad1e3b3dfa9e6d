#!/usr/bin/env bash
# The GPU check (docs/gpu.md), for a machine with one GPU and no network, in at most 8 minutes:
# the CUDA tests (each CUDA kernel against the CPU kernel; the engine on CUDA workers against CPU
# workers), then the headline experiment (device-adam, zero-offload, zero-offload-dpu, zenflow, and
# zenflow with precision bf16) on a GPT spec sized for the GPU (experiments/headline/spec-gpu.json). Results go to OUTDIR.
#   bash tools/device-check.sh bundle     here (Debian, nvcc): build the CUDA variant and pack
#                                         build-cuda/device-bundle.tar.xz (binaries, the libraries
#                                         they need beyond glibc and CUDA, KJV text, a Fashion-MNIST
#                                         subset) to carry to the GPU machine
#   bash tools/device-check.sh OUTDIR     on the GPU machine: use the carried bundle (or, without
#                                         one, carried build-cuda/ + build/starpu-cuda/, or build
#                                         them with tools/zf build-cuda), run, write OUTDIR
# Environment: ZF_DEVICE_BUNDLE (the bundle's path), ZF_DEVICE_STEPS (steps per headline run,
# default from the spec), ZF_DEVICE_ARGS (more zenflow-run arguments, split on spaces, e.g.
# "--set model.n_layer=12"), ZF_DEVICE_BUDGET_S (whole check, default 470).
# OUTDIR gets at most 8 files: device-check.log, env.txt, cuda-tests.log, summary.md,
# results.csv, metrics.tar.gz (the five runs' metrics JSON and output).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bundle_tar="${ZF_DEVICE_BUNDLE:-$root/build-cuda/device-bundle.tar.xz}"
t_start=$SECONDS

# ------------------------------------------------------------------ bundle (development machine)
if [ "${1:-}" = bundle ]; then
  set -e
  ZF_CUDA_ARCHS="${ZF_CUDA_ARCHS:-90}" bash "$root/tools/zf" build-cuda
  cb="${ZF_CUDA_BUILD_DIR:-$root/build-cuda}"
  stage="$cb/device-bundle"
  rm -rf "$stage"
  mkdir -p "$stage"/{bin,lib,glibc,data/fashion-mnist}
  cp "$cb/zenflow-run" "$cb/tests/zf_cuda_tests" "$stage/bin/"
  strip --strip-debug "$stage"/bin/*
  # every library the binaries load, except the CUDA ones (the GPU machine has its own toolkit)
  # and the driver; glibc and the C++ runtime apart (used only where the machine's glibc is older)
  ldd "$stage/bin/zenflow-run" "$stage/bin/zf_cuda_tests" | awk '/=> \// {print $3}' | sort -u |
    while read -r lib; do
      name="$(basename "$lib")"
      case "$name" in
        libcuda.so*|libcudart.so*|libcublas*.so*|libcusparse.so*|libnvJitLink.so*|libnvidia-*) ;;
        libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libstdc++.so.*|libgcc_s.so.*)
          cp -L "$lib" "$stage/glibc/" ;;  # the machine's own, unless it is older than Debian 12's
        *) cp -L "$lib" "$stage/lib/" ;;
      esac
    done
  cp -L /lib64/ld-linux-x86-64.so.2 "$stage/glibc/"
  strip --strip-debug "$stage"/lib/*.so* 2>/dev/null || true
  cp /var/tmp/zenflow/kjv.txt "$stage/data/kjv.txt"
  python3 - "$stage/data/fashion-mnist" <<'EOF'
# The first 2048 training and 500 test examples of Fashion-MNIST, as IDX files (the engine tests).
import gzip, struct, sys
src, dst = "/usr/share/datasets/fashion-mnist", sys.argv[1]
for name, n in [("train-images-idx3-ubyte", 2048), ("train-labels-idx1-ubyte", 2048),
                ("t10k-images-idx3-ubyte", 500), ("t10k-labels-idx1-ubyte", 500)]:
    b = gzip.open(f"{src}/{name}.gz").read()
    nd = b[3]
    dims = list(struct.unpack(f">{nd}I", b[4:4 + 4 * nd]))
    per = 1
    for d in dims[1:]:
        per *= d
    dims[0] = n
    body = b[4 + 4 * nd: 4 + 4 * nd + n * per]
    with gzip.open(f"{dst}/{name}.gz", "wb") as f:
        f.write(b[:4] + struct.pack(f">{nd}I", *dims) + body)
EOF
  tar -C "$cb" -cJf "$bundle_tar.tmp" device-bundle
  mv "$bundle_tar.tmp" "$bundle_tar"
  echo "device-check: bundle $bundle_tar ($(du -h "$bundle_tar" | cut -f1)); carry it, then run" \
    "bash tools/device-check.sh OUTDIR there"
  exit 0
fi

# ------------------------------------------------------------------ the check (GPU machine)
out="${1:?usage: bash tools/device-check.sh OUTDIR | bundle}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
log="$out/device-check.log"
exec > >(tee "$log") 2>&1
budget="${ZF_DEVICE_BUDGET_S:-470}"
left() { echo $((budget - (SECONDS - t_start))); }
say() { echo "device-check [$((SECONDS - t_start)) s]: $*"; }
work="$(mktemp -d /tmp/zf-device-XXXXXX)"

# 1. binaries and libraries: the bundle, else carried build trees, else build them
if [ -f "$bundle_tar" ]; then
  tar -C "$work" -xJf "$bundle_tar"
  b="$work/device-bundle"
  run_bin="$b/bin/zenflow-run"
  test_bin="$b/bin/zf_cuda_tests"
  libpath="$b/lib"
  kjv="$b/data/kjv.txt"
  fashion="$b/data/fashion-mnist"
  say "using the bundle $bundle_tar"
else
  cb="${ZF_CUDA_BUILD_DIR:-$root/build-cuda}"
  if [ ! -x "$cb/zenflow-run" ] || [ ! -x "$cb/tests/zf_cuda_tests" ]; then
    say "no bundle and no carried $cb: building (tools/zf build-cuda)"
    bash "$root/tools/zf" build-cuda || { say "build failed"; exit 1; }
  fi
  run_bin="$cb/zenflow-run"
  test_bin="$cb/tests/zf_cuda_tests"
  libpath="${ZF_STARPU_PREFIX:-$root/build/starpu-cuda}/lib"
  kjv="/var/tmp/zenflow/kjv.txt"
  fashion="/usr/share/datasets/fashion-mnist"
  say "using the build tree $cb"
fi
# CUDA's libraries from the machine: the toolkit, else pip's nvidia-* wheels
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && libpath="$libpath:$d"
done
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcusparse.so.12 libnvJitLink.so.13; do
  if ! LD_LIBRARY_PATH="$libpath" ldd "$test_bin" 2>/dev/null | grep "$lib => /" >/dev/null; then
    f="$(find /opt /usr -name "$lib" -print -quit 2>/dev/null)"
    [ -n "$f" ] && libpath="$libpath:$(dirname "$f")"
  fi
done
export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Debian 12's glibc is 2.36: on an older one run through the bundle's own loader and libc
launcher=()
sysglibc="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
if [ -n "${b:-}" ] && [ "$(printf '%s\n2.36\n' "$sysglibc" | sort -V | sed -n 1p)" != 2.36 ]; then
  launcher=("$b/glibc/ld-linux-x86-64.so.2" --library-path "$b/glibc:$LD_LIBRARY_PATH")
  say "glibc $sysglibc < 2.36: running through the bundled loader"
fi
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname) cores: $(nproc) glibc: $sysglibc"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  nvcc --version 2>/dev/null | tail -1
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  LD_LIBRARY_PATH="$LD_LIBRARY_PATH" ldd "$test_bin" | grep -E "not found|starpu|cuda|cublas|openblas|hwloc"
} >"$out/env.txt" 2>&1
cat "$out/env.txt"
if ldd "$test_bin" | grep "not found" >/dev/null; then
  say "libraries missing (see env.txt)"
fi

export STARPU_HOME="$work/starpu-home" STARPU_SILENT=1
mkdir -p "$STARPU_HOME"

# 2. CUDA tests
say "CUDA tests (budget left $(left) s)"
ZF_FASHION_MNIST_DIR="$fashion" timeout 200 "${launcher[@]}" "$test_bin" >"$out/cuda-tests.log" 2>&1
rc_tests=$?
grep -E '^\[ *(OK|FAILED|SKIPPED) *\] .*\(|^\[==========\]|^\[  PASSED  \]|Failure|Expected|Which is|got |residual' \
  "$out/cuda-tests.log" | sed -n 1,80p
say "CUDA tests exit $rc_tests"

# 3. headline on the GPU spec: one run per strategy, each bounded by what is left
spec="$root/experiments/headline/spec-gpu.json"
runs="$work/runs"
mkdir -p "$runs"
steps_arg=()
[ -n "${ZF_DEVICE_STEPS:-}" ] && steps_arg=(--steps "$ZF_DEVICE_STEPS")
read -r -a extra_args <<<"${ZF_DEVICE_ARGS:-}"
# zenflow-bf16: zenflow with precision bf16 (docs/spec.md), last so that it is the one dropped when
# time runs short
for s in device-adam zero-offload zero-offload-dpu zenflow zenflow-bf16; do
  strategy_args=(--strategy "${s%-bf16}")
  [ "$s" != "${s%-bf16}" ] && strategy_args+=(--set precision=bf16)
  l=$(left)
  if [ "$l" -lt 45 ]; then
    say "skipping $s: $l s left"
    continue
  fi
  lim=$((l - 30))
  [ "$lim" -gt 150 ] && lim=150
  say "headline $s (limit $lim s)"
  timeout "$lim" "${launcher[@]}" "$run_bin" "$spec" "${strategy_args[@]}" --set "data.path=\"$kjv\"" \
    "${steps_arg[@]}" "${extra_args[@]}" --metrics "$runs/$s.json" >"$runs/$s.out" 2>&1
  rc=$?
  tail -n 14 "$runs/$s.out"
  say "$s exit $rc"
done

# 4. summary
python3 - "$runs" "$out" <<'EOF' || say "summary failed"
import csv, json, os, sys
runs, out = sys.argv[1], sys.argv[2]
rows = []
for s in ["device-adam", "zero-offload", "zero-offload-dpu", "zenflow", "zenflow-bf16"]:
    p = f"{runs}/{s}.json"
    if not os.path.exists(p):
        rows.append({"strategy": s, "status": "not run or failed"})
        continue
    m = json.load(open(p))
    f = m.get("final", {})
    rows.append({
        "strategy": s, "status": "ok",
        "median_step_ms": round(1e3 * m["step_time_s"]["median"], 3),
        "device_busy_ms": round(1e3 * m["device_busy_s_per_step"], 3),
        "stall_fraction": round(m["stall_fraction"], 4),
        "bytes_per_step_MB": round((m["bytes"]["device_to_host"] + m["bytes"]["host_to_device"]) / 1e6, 3),
        "train_loss": f.get("train_loss"), "eval_loss": f.get("eval_loss"),
        "steps": m.get("steps"), "workers": json.dumps(m.get("workers")),
        "staleness_max": m.get("staleness", {}).get("max", ""),
    })
keys = []
for r in rows:
    keys += [k for k in r if k not in keys]
with open(f"{out}/results.csv", "w", newline="") as fh:
    w = csv.DictWriter(fh, fieldnames=keys)
    w.writeheader()
    w.writerows(rows)
base = next((r["median_step_ms"] for r in rows if r["strategy"] == "zero-offload" and r["status"] == "ok"), None)
lines = ["# Device check: headline on experiments/headline/spec-gpu.json", "",
         "| strategy | median step (ms) | device busy (ms) | stall | MB/step | speedup vs zero-offload | eval loss |",
         "|---|---|---|---|---|---|---|"]
for r in rows:
    if r["status"] != "ok":
        lines.append(f"| {r['strategy']} | {r['status']} | | | | | |")
        continue
    sp = f"{base / r['median_step_ms']:.2f}x" if base else "-"
    lines.append(f"| {r['strategy']} | {r['median_step_ms']:.2f} | {r['device_busy_ms']:.2f} | {r['stall_fraction']:.3f} "
                 f"| {r['bytes_per_step_MB']:.1f} | {sp} | {r['eval_loss'] if r['eval_loss'] is None else round(r['eval_loss'], 4)} |")
open(f"{out}/summary.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
tar -C "$work" -czf "$out/metrics.tar.gz" runs 2>/dev/null
rm -rf "$work"
say "done in $((SECONDS - t_start)) s; CUDA tests exit $rc_tests; results in $out"
exit $rc_tests
