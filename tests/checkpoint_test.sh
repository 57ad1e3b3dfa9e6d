#!/usr/bin/env bash
# A checkpoint directory under crashes and concurrent runs, through zenflow-run (docs/checkpoints.md):
# - kill -9 after every filesystem operation of a checkpoint write (ZF_FAULT_AFTER_FSOPS=N, N = 1, 2,
#   ... until the write completes), in each of the writer's four paths: a new step, a step directory
#   that `latest` does not name, the step `latest` names (RENAME_EXCHANGE) and the same without
#   RENAME_EXCHANGE (ZF_FAULT_NO_RENAME_EXCHANGE=1). After each kill `latest` names a complete
#   checkpoint, the next run removes the dead writer's temporaries, and resuming from `latest` ends
#   with the weights of an uninterrupted run, bit for bit;
# - a second writer is refused with exit 2 naming the holder (its lock held with flock(1));
# - a directory holding another run's checkpoints is refused with exit 2 without --checkpoint-overwrite;
# - bad checkpoints built from a good one (python3 edits and re-signs them) exit 2 naming file and field.
# Prints "FAIL: ..." and exits 1 on any failure.
# Usage: checkpoint_test.sh ZENFLOW_RUN
set -u

if [ $# -ne 1 ]; then
  echo "usage: $0 ZENFLOW_RUN" >&2
  exit 1
fi
BIN=$1
[ -x "$BIN" ] || { echo "FAIL: $BIN is not an executable"; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/zf_ckpt_XXXXXX") || { echo "FAIL: mktemp"; exit 1; }
trap 'rm -rf "$TMP"' EXIT
export STARPU_HOME=$TMP/starpu-home  # its own calibration home
export STARPU_SILENT=1 STARPU_WORKERS_NOBIND=1
mkdir -p "$STARPU_HOME"

# A one-layer byte-level GPT on a generated text, ZenFlow with two host jobs in flight: a run takes
# a fraction of a second, and its checkpoints hold every kind of state.
for i in $(seq 1 200); do echo "verse $i: and the checkpoint was written, and it was good."; done >"$TMP/text.txt"
SPEC=$TMP/spec.json
cat >"$SPEC" <<EOF
{"name": "ckpt-test", "strategy": "zenflow",
 "model": {"type": "gpt", "n_layer": 1, "n_head": 1, "n_embd": 8, "context": 8},
 "data": {"dataset": "text", "path": "$TMP/text.txt", "eval_limit": 4},
 "train": {"batch_size": 4, "eval_batch_size": 4},
 "zenflow": {"topk_ratio": 0.5, "update_interval": 2, "overlap_step": true, "max_staleness": 2,
             "select_strategy": "step", "select_interval": 4},
 "runtime": {"tile_elems": 64}, "log": {"every": 0}}
EOF
PASSED=0

fail() {
  echo "FAIL: $*"
  echo "---- last command output (stdout+stderr) ----"
  cat "$TMP/out" 2>/dev/null
  exit 1
}
run() {  # zenflow-run SPEC -q ARGS..., output in $TMP/out; returns its exit code
  timeout 300 "$BIN" "$SPEC" -q "$@" >"$TMP/out" 2>&1
}
# expect RC NAME PATTERN... -- ARGS...: exit code RC and every PATTERN (fixed strings) in the output
expect() {
  local want=$1 name=$2
  shift 2
  local patterns=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    patterns+=("$1")
    shift
  done
  shift
  run "$@"
  local rc=$?
  [ "$rc" -eq "$want" ] || fail "$name: exit code $rc, expected $want (zenflow-run $*)"
  local p
  for p in "${patterns[@]}"; do
    grep -qF -- "$p" "$TMP/out" || fail "$name: output lacks '$p' (zenflow-run $*)"
  done
  echo "ok: $name"
  PASSED=$((PASSED + 1))
}

# the uninterrupted run, and a checkpoint directory after steps 1, 3 and 5 (latest: step 5)
run --steps 10 --save "$TMP/ref.safetensors" || fail "reference run"
run --steps 6 --checkpoint-dir "$TMP/base" --checkpoint-every 2 || fail "base checkpoints"
[ "$(cat "$TMP/base/latest")" = step-00000005 ] || fail "base: latest is '$(cat "$TMP/base/latest")'"

# crash_every_op NAME ENV ARGS...: kills the run (ENV set, ARGS) after its 1st, 2nd, ... filesystem
# operation of checkpoint writing, each time on a fresh copy of base, until it completes.
crash_every_op() {
  local name=$1 envs=$2
  shift 2
  local n=1 rc kills=0
  while :; do
    rm -rf "$TMP/ck"
    cp -a "$TMP/base" "$TMP/ck"
    { env ZF_FAULT_AFTER_FSOPS=$n $envs timeout 300 "$BIN" "$SPEC" -q "$@" >"$TMP/out" 2>&1; } 2>/dev/null  # no "Killed" notice
    rc=$?
    if [ "$rc" -eq 137 ]; then
      kills=$((kills + 1))
    elif [ "$rc" -ne 0 ]; then
      fail "$name: killed after operation $n: exit code $rc, expected 137 (SIGKILL) or 0"
    fi
    local latest
    latest=$(cat "$TMP/ck/latest")
    [ -f "$TMP/ck/$latest/state.safetensors" ] && [ -f "$TMP/ck/$latest/model.safetensors" ] ||
      fail "$name: after operation $n, latest names '$latest', not a complete step directory"
    # the next run: removes the dead writer's temporaries, resumes from latest, matches the reference
    run --resume "$TMP/ck" --checkpoint-dir "$TMP/ck" --steps 10 --save "$TMP/resumed.safetensors" ||
      fail "$name: after operation $n: resuming from latest ($latest) failed"
    cmp -s "$TMP/ref.safetensors" "$TMP/resumed.safetensors" ||
      fail "$name: after operation $n: resumed weights differ from the uninterrupted run's"
    local left
    left=$(ls -A "$TMP/ck" | grep -E '^\.(tmp|old|pin)-step-|^\.latest\.tmp\.')
    [ -z "$left" ] || fail "$name: after operation $n: temporaries left behind by the next run: $left"
    [ "$rc" -eq 0 ] && break
    n=$((n + 1))
    [ $n -le 200 ] || fail "$name: still killed after 200 operations (ZF_FAULT_AFTER_FSOPS counts too much?)"
  done
  # a write is at least: mkdir, two files of 5 operations, fsync, rename, fsync, latest (7)
  [ $kills -ge 20 ] || fail "$name: the write completed after $kills kills (ZF_FAULT_AFTER_FSOPS ineffective?)"
  echo "ok: $name: killed after each of its $kills filesystem operations: latest stayed loadable, resume bitwise"
  PASSED=$((PASSED + 1))
}
crash_every_op "new step directory" "" --resume "$TMP/ck" --checkpoint-dir "$TMP/ck" --steps 8
crash_every_op "rewrite of a step latest does not name" "" --resume "$TMP/ck/step-00000001" --checkpoint-dir "$TMP/ck" --steps 4
crash_every_op "rewrite of the step latest names" "" --resume "$TMP/ck/step-00000003" --checkpoint-dir "$TMP/ck" --steps 6
crash_every_op "rewrite of the step latest names, without RENAME_EXCHANGE" "ZF_FAULT_NO_RENAME_EXCHANGE=1" \
  --resume "$TMP/ck/step-00000003" --checkpoint-dir "$TMP/ck" --steps 6

# ---- one writer per directory
cp -a "$TMP/base" "$TMP/locked"
printf 'pid 4242\nhost otherhost\nstarted 2026-01-01T00:00:00Z\n' >"$TMP/locked/lock"
if command -v flock >/dev/null 2>&1; then
  flock "$TMP/locked/lock" timeout 300 "$BIN" "$SPEC" -q --steps 8 --resume "$TMP/locked" --checkpoint-dir "$TMP/locked" \
    >"$TMP/out" 2>&1
  rc=$?
  [ $rc -eq 2 ] || fail "second writer: exit code $rc, expected 2"
  for p in "--checkpoint-dir $TMP/locked" "in use by another run" "pid 4242 host otherhost started 2026-01-01T00:00:00Z"; do
    grep -qF -- "$p" "$TMP/out" || fail "second writer: output lacks '$p'"
  done
  echo "ok: a second writer is refused, naming the holder"
  PASSED=$((PASSED + 1))
else
  echo "skipped: second writer (flock(1) not installed)"
fi
expect 0 "the lock is free again once its holder is gone" -- --steps 8 --resume "$TMP/locked" --checkpoint-dir "$TMP/locked"
grep -qF "pid " "$TMP/locked/lock" || fail "the lock file does not name its holder"

# ---- another run's directory
cp -a "$TMP/base" "$TMP/theirs"
expect 2 "another run's directory is refused" "--checkpoint-dir $TMP/theirs" "another run" "train.seed" \
  "--checkpoint-overwrite" -- --steps 4 --set train.seed=7 --checkpoint-dir "$TMP/theirs"
[ -d "$TMP/theirs/step-00000005" ] || fail "a refused run deleted checkpoints"
expect 0 "--checkpoint-overwrite replaces it" -- --steps 4 --set train.seed=7 --checkpoint-dir "$TMP/theirs" \
  --checkpoint-overwrite
[ "$(ls "$TMP/theirs" | grep -c '^step-')" -eq 1 ] && [ -d "$TMP/theirs/step-00000003" ] ||
  fail "--checkpoint-overwrite: step directories left: $(ls "$TMP/theirs")"
expect 0 "and the directory is then this run's" -- --steps 6 --set train.seed=7 --resume "$TMP/theirs" \
  --checkpoint-dir "$TMP/theirs"
expect 2 "--checkpoint-overwrite needs --checkpoint-dir" "--checkpoint-overwrite" -- --steps 4 --checkpoint-overwrite

# ---- bad checkpoints: exit 2 naming the file and the field (python3 edits and re-signs them)
if command -v python3 >/dev/null 2>&1; then
  # edit.py FILE KEY VALUE|@TEXTFILE | FILE --i32 TENSOR INDEX VALUE: edits, then rewrites both CRC-32s
  # (zf_header_crc32: of the header dumped with sorted keys and no spaces, as nlohmann::json does)
  cat >"$TMP/edit.py" <<'PY'
import json, struct, sys, zlib
path = sys.argv[1]
b = open(path, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h, data = json.loads(b[8:8 + n]), bytearray(b[8 + n:])
if sys.argv[2] == "--i32":
    a = h[sys.argv[3]]["data_offsets"][0]
    struct.pack_into("<i", data, a + 4 * int(sys.argv[4]), int(sys.argv[5]))
else:  # a value @FILE: the file's text
    v = sys.argv[3]
    h["__metadata__"][sys.argv[2]] = open(v[1:]).read() if v.startswith("@") else v
md = h["__metadata__"]
crc = 0
for off, k in sorted((v["data_offsets"][0], k) for k, v in h.items() if k != "__metadata__"):
    a, e = h[k]["data_offsets"]
    crc = zlib.crc32(bytes(data[a:e]), crc)
md["zf_crc32"] = str(crc)
md.pop("zf_header_crc32", None)
md["zf_header_crc32"] = str(zlib.crc32(json.dumps(h, separators=(",", ":"), sort_keys=True).encode()))
s = json.dumps(h, separators=(",", ":"))
s += " " * ((8 - (8 + len(s)) % 8) % 8)
open(path, "wb").write(struct.pack("<Q", len(s)) + s.encode() + bytes(data))
PY
  bad() {  # bad EDIT-ARGS...: $TMP/bad, a copy of base with its latest state file edited
    rm -rf "$TMP/bad"
    cp -a "$TMP/base" "$TMP/bad"
    python3 "$TMP/edit.py" "$TMP/bad/step-00000005/state.safetensors" "$@" || fail "edit.py $*"
  }
  ST=$TMP/bad/step-00000005/state.safetensors
  bad step 5
  expect 0 "a re-signed, unchanged checkpoint resumes" -- --steps 8 --resume "$TMP/bad"
  bad step 2xyz
  expect 2 "step '2xyz'" "$ST: __metadata__.step" "'2xyz' is not a step number" -- --steps 8 --resume "$TMP/bad"
  bad step -5
  expect 2 "step '-5'" "$ST: __metadata__.step" -- --steps 8 --resume "$TMP/bad"
  bad spec '[1,2]'
  expect 2 "spec [1,2]" "$ST: __metadata__.spec" "expected a JSON object" -- --steps 8 --resume "$TMP/bad"
  python3 -c 'print("{\"strategy\":\"zenflow\",\"model\":" + "[" * 100000 + "]" * 100000 + "}")' >"$TMP/deep.json"
  bad spec "@$TMP/deep.json"
  expect 2 "spec nested 100000 deep" "$ST: __metadata__.spec" "levels deep" -- --steps 8 --resume "$TMP/bad"
  SEL=$(python3 -c "
import json, struct, sys
b = open('$TMP/base/step-00000005/state.safetensors', 'rb').read()
h = json.loads(b[8:8 + struct.unpack('<Q', b[:8])[0]])
print(sorted(k for k in h if k.startswith('device.sel.'))[0])")
  bad --i32 "$SEL" 0 -5
  expect 2 "a selected column of -5" "$ST: $SEL" "outside" -- --steps 8 --resume "$TMP/bad"
  bad --i32 "$SEL" 0 1000000000
  expect 2 "a selected column of 1e9" "$ST: $SEL" "outside" -- --steps 8 --resume "$TMP/bad"
else
  echo "skipped: bad checkpoints through the CLI (python3 not installed; tests/graphs/test_checkpoint.cpp has them all)"
fi

echo "checkpoint_test: all $PASSED checks passed"
exit 0
