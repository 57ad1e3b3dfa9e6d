#!/usr/bin/env bash
# The machine-file generator (tools/sim_machine.py, docs/simulation.md "Machine files"), without the
# simulation build: every committed machine file generates for 1 and 2 ranks (where it has 2 GPUs);
# the DGX A100's rank gets 64 of 128 cores, and 64 workers of 2 cores each alone; its GPU pair shares
# its PCIe uplink; and a broken machine file exits 2 naming the field.
set -uo pipefail
SRC=${1:?usage: sim_machine_test.sh SOURCE_DIR}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
gen() { python3 "$SRC/tools/sim_machine.py" "$@" 2>"$TMP/err"; }
kv() { awk -v k="$2" '$1 == k { print $2 }' "$1"; }
for m in "$SRC"/graphs/machines/*.json; do
  name=$(basename "$m" .json)
  gen "$m" "$TMP/$name.r1" || fail "$name: exit $? ($(cat "$TMP/err"))"
  gpus=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gpus"]["count"])' "$m")
  if ((gpus >= 2)); then gen "$m" "$TMP/$name.r2" --ranks 2 || fail "$name --ranks 2: exit $?"; fi
done
echo "ok: every machine file generates"

D=$TMP/dgx-a100-40g
grep -qx "ZF_SIM_CORES=64" "$D.r1/dgx-a100-40g.env" || fail "DGX A100, one rank: not 64 workers"
[ "$(kv "$D.r1/dgx-a100-40g.roofline" cpu.cores_per_worker)" = 2 ] || fail "DGX A100, one rank: a worker is not 2 cores"
[ "$(kv "$D.r2/dgx-a100-40g.roofline" cpu.cores_per_worker)" = 1 ] || fail "DGX A100, rank 0 of 2: a worker is not one core"
# one core's rate: min(24 GB/s, 409.6 GB/s / 128 cores) x 0.8; two of them per worker alone
python3 - "$D.r1/dgx-a100-40g.roofline" "$D.r2/dgx-a100-40g.roofline" <<'PY' || fail "DGX A100: the workers' bandwidth"
import sys
r1, r2 = ({l.split()[0]: float(l.split()[1]) for l in open(p) if not l.startswith("#")} for p in sys.argv[1:])
core = min(24e9, 409.6e9 / 128) * 0.8
assert abs(r2["cpu.bytes"] - core) < 1 and abs(r1["cpu.bytes"] - 2 * core) < 1, (r1["cpu.bytes"], r2["cpu.bytes"])
assert abs(r1["link.gpu.bytes"] - 300e9 * 0.8) < 1, r1["link.gpu.bytes"]  # NVLink, efficiency.nvlink
PY
for r in 1 2; do
  want=$(python3 -c "print(f'{31.5e9 * 0.8 / $r:f}')")
  grep -q "link id=\"RAM-CUDA0\" bandwidth=\"${want}Bps\"" "$D.r$r/bus/dgx-a100-40g.platform.v4.xml" ||
    fail "DGX A100, $r ranks: host-to-GPU link is not the uplink's 1/$r"
done
echo "ok: DGX A100: 64 workers of 2 cores (one rank) or 64 of 1 (rank 0 of 2), NVLink, the shared uplink"

bad() {  # PYTHON-EDIT FIELD: the DGX file edited, expected exit 2 naming FIELD
  python3 - "$SRC/graphs/machines/dgx-a100-40g.json" "$TMP/bad.json" "$1" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(m, open(sys.argv[2], "w"))
PY
  gen "$TMP/bad.json" "$TMP/bad"
  local rc=$?
  [ $rc -eq 2 ] || fail "$2: exit $rc, expected 2"
  grep -q -- "$2" "$TMP/err" || fail "$2: the message does not name it: $(cat "$TMP/err")"
}
bad 'm["gpu_links"]["through"] = "pcie"' gpu_links.through
bad 'del m["efficiency"]["nvlink"]' efficiency.nvlink
bad 'm["pcie"]["gpus_per_uplink"] = 0' pcie.gpus_per_uplink
bad 'm["pcie"]["gpus_per_uplink"] = 1.5' pcie.gpus_per_uplink
bad 'm["host"]["sockets"] = 3' host.sockets
bad 'm["gpus"]["count"] = 9' gpus.count
bad 'm["efficiency"]["cpu_task_overhead_cold_us"] = -0.1' efficiency.cpu_task_overhead_cold_us
bad 'm["efficiency"]["cpu_task_overhead_cold_us"] = 30' efficiency.cpu_task_cold_bytes
echo "ok: broken machine files exit 2 naming the field"

# calibrate.py (experiments/simulation/calibrate.py) reads a trace's tasks per name and codelet:
# ZenFlow's accumulate.W[i] is a copy (zf_copy) in an interval's first step and an accumulation
# (zf_accumulate) in the others, and their times must not pool under one codelet (they did: the
# first step's codelet took them all, so zf_accumulate's efficiency came from gpt-kjv's tasks alone)
cat >"$TMP/t.csv" <<'CSV'
name,category,step,side,worker,start_us,end_us,codelet,ready_us
accumulate.w[0],copy,4,host,1,0,470,zf_copy,0
accumulate.w[0],copy,5,host,1,1000,1340,zf_accumulate,900
accumulate.w[0],copy,6,host,1,2000,2350,zf_accumulate,1900
accumulate.w[0],copy,7,host,1,3000,3330,zf_accumulate,2900
fwd.fc1,compute,7,device,0,3000,3100,zf_matmul_fwd,2990
CSV
PYTHONDONTWRITEBYTECODE=1 python3 - "$SRC/experiments/simulation" "$TMP/t.csv" <<'PY' || fail "calibrate.py pools one task name's two codelets"
import sys
sys.path.insert(0, sys.argv[1])
import calibrate
t = calibrate.read_tasks(sys.argv[2], 4)
assert t[("accumulate.w[0]", "zf_copy")] == ["host", "zf_copy", [470.0]], t
assert t[("accumulate.w[0]", "zf_accumulate")] == ["host", "zf_accumulate", [340.0, 350.0, 330.0]], t
assert t[("fwd.fc1", "zf_matmul_fwd")][2] == [100.0], t
assert calibrate.read_tasks(sys.argv[2], 5).get(("accumulate.w[0]", "zf_copy")) is None  # the warm-up left out
PY
echo "ok: calibrate.py keeps a task name's codelets apart"
