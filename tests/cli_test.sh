#!/usr/bin/env bash
# zenflow-run's exit codes: every class of bad input (spec key, type, value, --sched, --strategy,
# corrupt data file, malformed or mismatched --init weights, missing spec, bad option) exits 2
# with a message naming the file and field; --help and a tiny valid run exit 0, and the run's
# metrics JSON has the documented keys (docs/metrics.md). Prints "FAIL: ..." and exits 1 on any failure.
# Usage: cli_test.sh ZENFLOW_RUN SOURCE_DIR
set -u

if [ $# -ne 2 ]; then
  echo "usage: $0 ZENFLOW_RUN SOURCE_DIR" >&2
  exit 1
fi
BIN=$1
SRC=$2
SPEC=$SRC/graphs/specs/mlp-fashion.json
DATA=/usr/share/datasets/fashion-mnist

TMP=$(mktemp -d "${TMPDIR:-/tmp}/zf_cli_XXXXXX") || { echo "FAIL: mktemp"; exit 1; }
trap 'rm -rf "$TMP"' EXIT
export STARPU_HOME=$TMP/starpu-home  # this test's own calibration home (never shared)
export STARPU_SILENT=1 STARPU_WORKERS_NOBIND=1
mkdir -p "$STARPU_HOME"

[ -x "$BIN" ] || { echo "FAIL: $BIN is not an executable"; exit 1; }
[ -f "$SPEC" ] || { echo "FAIL: $SPEC not found"; exit 1; }

# Small and fast: the data subset every training run here uses.
SMALL=(--set data.train_limit=512 --set data.eval_limit=500 -q)
PASSED=0

fail() {
  echo "FAIL: $*"
  echo "---- command output (stdout+stderr) ----"
  cat "$TMP/out" 2>/dev/null
  exit 1
}

# expect RC NAME PATTERN... -- ARGS...: runs zenflow-run ARGS, expects exit code RC and output
# (stdout and stderr together) containing every PATTERN (fixed strings).
expect() {
  local want=$1 name=$2
  shift 2
  local patterns=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    patterns+=("$1")
    shift
  done
  [ $# -gt 0 ] || { echo "FAIL: test '$name' is missing '--'"; exit 1; }
  shift
  timeout 300 "$BIN" "$@" >"$TMP/out" 2>&1
  local rc=$?
  [ "$rc" -eq "$want" ] || fail "$name: exit code $rc, expected $want (zenflow-run $*)"
  local p
  for p in "${patterns[@]}"; do
    grep -qF -- "$p" "$TMP/out" || fail "$name: output lacks '$p' (zenflow-run $*)"
  done
  echo "ok: $name"
  PASSED=$((PASSED + 1))
}

# ---- the command line
expect 0 "--help exits 0 and mentions --strategy" "--strategy" "--sched" "--set" -- --help
expect 2 "unknown option" "--bogus-option" -- "$SPEC" --bogus-option
expect 2 "--steps not a number" "--steps" -- "$SPEC" --steps many
expect 2 "--steps negative" "--steps" "not in range" -- "$SPEC" --steps -5 --print-spec
expect 2 "no spec file given" "spec file is required" --
expect 2 "nonexistent spec file" "$TMP/no-such-spec.json" "cannot open" -- "$TMP/no-such-spec.json"

# ---- the spec
printf '{"model": {"hiden": [8]}}\n' >"$TMP/bad-key.json"
expect 2 "unknown nested spec key" "bad-key.json: model.hiden" "unknown key" -- "$TMP/bad-key.json"
expect 2 "unknown key via --set" "mlp-fashion.json: train.batchsize" "unknown key" -- "$SPEC" --set train.batchsize=8
printf '{"name": "x", "optimizer": {"lr": "fast"}}\n' >"$TMP/bad-type.json"
expect 2 "wrong type in the spec file" "bad-type.json: optimizer.lr" "expected a number" -- "$TMP/bad-type.json"
expect 2 "wrong type via --set" "mlp-fashion.json: train.batch_size" "expected an integer, got a string" \
  -- "$SPEC" --set 'train.batch_size="big"'
expect 2 "impossible value (batch_size 0)" "mlp-fashion.json: train.batch_size" "outside" \
  -- "$SPEC" --set train.batch_size=0
expect 2 "impossible value (betas)" "optimizer.betas[1]" -- "$SPEC" --set 'optimizer.betas=[0.9,1.0]'
expect 2 "impossible value (tile_elems)" "runtime.tile_elems" "multiple of 16" -- "$SPEC" --set runtime.tile_elems=1000
expect 2 "too many workers" "runtime.device_workers" \
  -- "$SPEC" --set runtime.device_workers=64 --set runtime.host_workers=64
expect 2 "--set into a non-object" "--set name.first=1" "'name' is not an object" -- "$SPEC" --set name.first=1
expect 2 "--set without =" "--set train.batch_size" "FIELD.PATH=VALUE" -- "$SPEC" --set train.batch_size
printf '{"name": "x",\n "train": {"batch_size": 8,}}\n' >"$TMP/broken.json"
expect 2 "spec not valid JSON" "broken.json" "not valid JSON" -- "$TMP/broken.json"
expect 2 "unsupported scheduler type" "mlp-fashion.json: scheduler.type" "OneCycle" "not supported" \
  -- "$SPEC" --set scheduler.type=OneCycle
expect 2 "WarmupDecayLR without total_num_steps" "scheduler.params.total_num_steps" "required" \
  -- "$SPEC" --set scheduler.type=WarmupDecayLR --set scheduler.params.warmup_num_steps=5
expect 2 "unknown --sched policy" "runtime.sched" "no-such-policy" -- "$SPEC" --sched no-such-policy
expect 0 "--list-policies lists StarPU's and ours" "lws" "dmdas" "zf-deadline" -- --list-policies
expect 0 "--list-policies names the unusable ones on stderr" "not usable: peager" "not usable: graph_test" -- --list-policies
"$BIN" --list-policies 2>/dev/null | grep -qx peager && fail "--list-policies lists peager on stdout"
for p in peager graph_test modular-heteroprio-heft; do  # a crash or a hang in StarPU 1.3: refused before
  expect 2 "--sched $p refused with the reason" "runtime.sched" "'$p' cannot run zenflow" -- "$SPEC" --sched "$p" --steps 2
done
expect 2 "runtime.priorities must be a boolean" "runtime.priorities" "expected true or false" \
  -- "$SPEC" --set runtime.priorities=1 --print-spec
expect 2 "unknown --strategy" "strategy" "no-such-strategy" "device-adam, zero-offload" -- "$SPEC" --strategy no-such-strategy
expect 2 "--metrics into a missing directory" "--metrics $TMP/no-such-dir/m.json" "does not exist" \
  -- "$SPEC" --metrics "$TMP/no-such-dir/m.json" --steps 2 "${SMALL[@]}"
expect 2 "--save onto a directory" "--save $TMP" "is a directory" -- "$SPEC" --save "$TMP" --steps 2 "${SMALL[@]}"
# ---- sizes that cannot fit: refused at once (exit 2, the fields named), not std::bad_alloc (exit 1)
expect 2 "2^31 - 1 steps of per-step records" "train.steps" "memory" -- "$SPEC" --steps 2147483647 -q
expect 2 "an MLP 65536 x 65536 x 65536" "model.hidden" "GiB" -- "$SPEC" --set 'model.hidden=[65536,65536,65536]' -q
expect 2 "a GPT 64 x 8192 with context 8192" "model.n_layer" "model.n_embd" "GiB" \
  -- "$SPEC" --set model.type=gpt --set data.dataset=kjv --set model.n_layer=64 --set model.n_embd=8192 \
  --set model.n_head=64 --set model.context=8192 -q
expect 0 "--print-spec with overrides" '"batch_size": 64' '"zero-offload"' \
  -- "$SPEC" --set train.batch_size=64 --strategy zero-offload --sched eager --print-spec
# --estimate-memory: the host and device parts per rank as JSON (each total the sum of its parts, the
# attention scratch included), nothing run; ZeRO stage 2 on 4 ranks
# holds a quarter of zero-offload's host optimizer state; checkpointing every layer shrinks the
# GPT's activations and reports them without it too; --ranks needs --estimate-memory
GPT=(--set model.type=gpt --set data.dataset=kjv --set model.n_layer=8)
timeout 60 "$BIN" "$SPEC" "${GPT[@]}" --strategy zero-offload --estimate-memory >"$TMP/e1.json" 2>"$TMP/out" ||
  fail "--estimate-memory exited $?"
timeout 60 "$BIN" "$SPEC" "${GPT[@]}" --strategy zero-offload --set zero_optimization.stage=2 --ranks 4 \
  --set train.batch_size=64 --set train.activation_checkpointing='"every_layer"' --estimate-memory >"$TMP/e4.json" \
  2>"$TMP/out" || fail "--estimate-memory --ranks 4 exited $?"
python3 - "$TMP/e1.json" "$TMP/e4.json" <<'PY' || fail "--estimate-memory's parts"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
for j in (a, b):
    for side in ("host", "device"):
        parts = {k: v for k, v in j[side].items() if k not in ("total", "activations_without_checkpointing")}
        assert j[side]["total"] == sum(parts.values()), (side, j[side])
    assert j["device"]["attention"] > 0, j["device"]  # the attention's scratch, in the total
    assert j["device_memory"] is None and j["device_fits"] is None, j  # a CPU device
assert a["ranks"] == 1 and b["ranks"] == 4, (a["ranks"], b["ranks"])
assert abs(b["host"]["optimizer"] * 4 - a["host"]["optimizer"]) < 1e-6 * a["host"]["optimizer"], (a["host"], b["host"])
assert "activations_without_checkpointing" not in a["device"]
assert b["device"]["activations"] < 0.5 * b["device"]["activations_without_checkpointing"], b["device"]
print("host optimizer state on 1 rank %d, on each of 4 at stage 2 %d; activations %d (checkpointed) of %d"
      % (a["host"]["optimizer"], b["host"]["optimizer"], b["device"]["activations"],
         b["device"]["activations_without_checkpointing"]))
PY
echo "ok: --estimate-memory"
PASSED=$((PASSED + 1))
expect 2 "--ranks without --estimate-memory" "--ranks" "--estimate-memory" -- "$SPEC" --ranks 2
expect 2 "activation checkpointing on the MLP" "train.activation_checkpointing" "mlp" \
  -- "$SPEC" --set train.activation_checkpointing='"every_layer"' --steps 1 -q

# ---- the data
if [ -d "$DATA" ]; then
  mkdir -p "$TMP/data"
  cp "$DATA"/*.gz "$TMP/data/"
  f=$TMP/data/train-labels-idx1-ubyte.gz
  head -c $(($(stat -c %s "$f") / 2)) "$DATA/train-labels-idx1-ubyte.gz" >"$f"
  expect 2 "data dir with a truncated gzip file" "train-labels-idx1-ubyte.gz" "gzip" \
    -- "$SPEC" --set data.dir="$TMP/data" --steps 2 "${SMALL[@]}"
  cp "$DATA/t10k-labels-idx1-ubyte.gz" "$f"
  expect 2 "data dir with a labels file of the wrong count" "train-labels-idx1-ubyte.gz" "10000 labels" "60000 images" \
    -- "$SPEC" --set data.dir="$TMP/data" --steps 2 "${SMALL[@]}"
  cp "$DATA/train-labels-idx1-ubyte.gz" "$f"
  cp "$DATA/t10k-labels-idx1-ubyte.gz" "$TMP/data/t10k-images-idx3-ubyte.gz"
  expect 2 "data dir with a labels file in place of images" "t10k-images-idx3-ubyte.gz" "bad magic" \
    -- "$SPEC" --set data.dir="$TMP/data" --steps 2 "${SMALL[@]}"
  rm "$TMP/data/t10k-images-idx3-ubyte.gz"
  expect 2 "data dir with a file missing" "t10k-images-idx3-ubyte.gz" "not found" \
    -- "$SPEC" --set data.dir="$TMP/data" --steps 2 "${SMALL[@]}"
  expect 2 "data dir that does not exist" "$TMP/no-such-dir" "data.dir" \
    -- "$SPEC" --set data.dir="$TMP/no-such-dir" --steps 2 "${SMALL[@]}"

  expect 0 "a schedule is printed in the header and the progress lines (step 3 at iteration 1: 0.0005)" "lr WarmupDecayLR: 0 to 0.001 over 2 steps (linear)" \
    "| lr 0.0005 |" -- "$SPEC" --set scheduler.type=WarmupDecayLR --set scheduler.params.warmup_num_steps=2 \
    --set scheduler.params.warmup_type=linear --set scheduler.params.total_num_steps=4 --set log.every=1 --steps 4 \
    --set data.train_limit=512 --set data.eval_limit=500
  expect 0 "a zenflow run says whose update rules it follows (default)" "strategy zenflow (semantics zenflow)" \
    -- "$SPEC" --strategy zenflow --set zenflow.update_interval=2 --steps 3 --set data.train_limit=512 --set data.eval_limit=500
  expect 0 "a zenflow run says whose update rules it follows (--set zenflow.semantics=deepspeed)" \
    "strategy zenflow (semantics deepspeed)" -- "$SPEC" --strategy zenflow --set zenflow.update_interval=2 \
    --set zenflow.semantics=deepspeed --steps 3 --set data.train_limit=512 --set data.eval_limit=500

  # ---- weights files
  printf 'this is not a safetensors file at all' >"$TMP/garbage.safetensors"
  expect 2 "--init with a malformed safetensors file" "garbage.safetensors" "header length" \
    -- "$SPEC" --init "$TMP/garbage.safetensors" --steps 2 "${SMALL[@]}"
  expect 2 "--init with a missing file" "$TMP/missing.safetensors" -- "$SPEC" --init "$TMP/missing.safetensors" --steps 2 "${SMALL[@]}"
  expect 2 "--init with a directory" "$TMP/data" -- "$SPEC" --init "$TMP/data" --steps 2 "${SMALL[@]}"
  expect 0 "tiny run saving weights (hidden [8])" \
    -- "$SPEC" --set 'model.hidden=[8]' --steps 3 --save "$TMP/small.safetensors" "${SMALL[@]}"
  [ -s "$TMP/small.safetensors" ] || fail "--save did not write $TMP/small.safetensors"
  expect 0 "--init with matching weights" \
    -- "$SPEC" --set 'model.hidden=[8]' --steps 2 --init "$TMP/small.safetensors" "${SMALL[@]}"
  expect 2 "--init with weights of a different model shape" "small.safetensors" "the model needs" \
    -- "$SPEC" --init "$TMP/small.safetensors" --steps 2 "${SMALL[@]}"
  expect 2 "--init with weights of a different depth" "small.safetensors" \
    -- "$SPEC" --set 'model.hidden=[8,8]' --init "$TMP/small.safetensors" --steps 2 "${SMALL[@]}"
  head -c $(($(stat -c %s "$TMP/small.safetensors") - 16)) "$TMP/small.safetensors" >"$TMP/cut.safetensors"
  expect 2 "--init with a truncated weights file" "cut.safetensors" "truncated" \
    -- "$SPEC" --set 'model.hidden=[8]' --init "$TMP/cut.safetensors" --steps 2 "${SMALL[@]}"

  # ---- issue 17, input reliability: non-regular data files, numbers out of range, overflow,
  # non-finite weights, empty evaluation sets, outputs checked before the run
  mkdir -p "$TMP/fifo"
  for f in "$DATA"/*.gz; do ln -s "$f" "$TMP/fifo/"; done
  rm "$TMP/fifo/train-labels-idx1-ubyte.gz"
  mkfifo "$TMP/fifo/train-labels-idx1-ubyte.gz"
  expect 2 "a FIFO as an IDX file (no hang)" "train-labels-idx1-ubyte.gz" "FIFO" \
    -- "$SPEC" --set data.dir="$TMP/fifo" --steps 2 "${SMALL[@]}"
  rm "$TMP/fifo/train-labels-idx1-ubyte.gz"
  ln -s "$TMP/fifo/loop-b" "$TMP/fifo/train-labels-idx1-ubyte.gz"
  ln -s "$TMP/fifo/train-labels-idx1-ubyte.gz" "$TMP/fifo/loop-b"
  expect 2 "a symlink loop as an IDX file" "train-labels-idx1-ubyte.gz" "symbolic links" \
    -- "$SPEC" --set data.dir="$TMP/fifo" --steps 2 "${SMALL[@]}"
  mkfifo "$TMP/text-fifo"
  expect 2 "a FIFO as a text data file (no hang)" "data.path" "text-fifo" "FIFO" \
    -- "$SPEC" --set model.type=gpt --set data.dataset=text --set data.path="$TMP/text-fifo" --steps 2 -q
  # a lone surrogate (U+D800 as ED A0 80) after 9 bytes of valid text (8 characters: é is 2 bytes)
  { printf 'caf\xc3\xa9 tea\xed\xa0\x80'; head -c 200 /dev/zero | tr '\0' a; } >"$TMP/surrogate.txt"
  expect 2 "a text data file that is not UTF-8" "data.path: $TMP/surrogate.txt" "byte offset 9 (0xED 0xA0 0x80" \
    -- "$SPEC" --set model.type=gpt --set data.dataset=text --set data.path="$TMP/surrogate.txt" --steps 2 -q
  # well-formed 2-, 3- and 4-byte characters (é, €, an emoji) are text: trained on
  for _ in $(seq 40); do printf 'caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 '; done >"$TMP/multibyte.txt"
  expect 0 "a text data file with multi-byte UTF-8" -- "$SPEC" --set model.type=gpt --set data.dataset=text \
    --set data.path="$TMP/multibyte.txt" --set model.context=16 --set train.batch_size=2 --steps 2 -q
  # ---- token files (data.dataset "tokens", docs/gpt.md "Token files"): each bad file exits 2
  # naming the field, the file and what was expected; good ones train
  TOK=(--set model.type=gpt --set data.dataset=tokens --set model.context=16 --set train.batch_size=2 --steps 2 -q)
  perl -e 'print pack("v*", map { $_ * 7 % 256 } 0..199)' >"$TMP/tok.bin"
  perl -e 'print pack("V*", map { $_ * 977 % 70000 } 0..199)' >"$TMP/tok.u32.bin"
  perl -e 'print pack("l<3", 20240520, 1, 200), "\0" x 1012, pack("v*", map { $_ % 256 } 0..199)' >"$TMP/llmc.bin"
  expect 0 "raw uint16 token files, sequential order" -- "$SPEC" "${TOK[@]}" --set data.path="$TMP/tok.bin" \
    --set data.eval_path="$TMP/llmc.bin" --set data.order=sequential
  expect 0 "a uint32 token file with model.vocab 70000" -- "$SPEC" "${TOK[@]}" --set data.path="$TMP/tok.u32.bin" \
    --set data.eval_path="$TMP/tok.bin" --set model.vocab=70000
  expect 2 "token ids beyond model.vocab" "data.path: $TMP/tok.u32.bin" "token id 977 at byte offset 4" \
    "model.vocab = 256" -- "$SPEC" "${TOK[@]}" --set data.path="$TMP/tok.u32.bin" --set data.eval_path="$TMP/tok.bin"
  expect 2 "tokens without data.eval_path" "data.eval_path" "required" -- "$SPEC" "${TOK[@]}" --set data.path="$TMP/tok.bin"
  head -c 1100 "$TMP/llmc.bin" >"$TMP/llmc-cut.bin"
  expect 2 "a truncated llm.c token file" "data.eval_path: $TMP/llmc-cut.bin" "truncated" "announces 200 uint16 ids" \
    -- "$SPEC" "${TOK[@]}" --set data.path="$TMP/tok.bin" --set data.eval_path="$TMP/llmc-cut.bin"
  head -c 500 "$TMP/llmc.bin" >"$TMP/llmc-hdr.bin"
  expect 2 "an llm.c header cut short" "$TMP/llmc-hdr.bin" "truncated llm.c header" "1024-byte header" \
    -- "$SPEC" "${TOK[@]}" --set data.path="$TMP/llmc-hdr.bin" --set data.eval_path="$TMP/tok.bin"
  perl -e 'print pack("l<3", 20240520, 3, 200), "\0" x 1012, pack("v*", 0..199)' >"$TMP/llmc-ver.bin"
  expect 2 "a bad llm.c header (version 3)" "$TMP/llmc-ver.bin" "bad llm.c header: version 3" "expected 1" \
    -- "$SPEC" "${TOK[@]}" --set data.path="$TMP/llmc-ver.bin" --set data.eval_path="$TMP/tok.bin"
  { cat "$TMP/tok.bin"; printf x; } >"$TMP/tok-odd.bin"
  expect 2 "a raw token file with an odd byte count" "$TMP/tok-odd.bin" "odd byte count 401" \
    -- "$SPEC" "${TOK[@]}" --set data.path="$TMP/tok-odd.bin" --set data.eval_path="$TMP/tok.bin"
  : >"$TMP/tok-empty.bin"
  expect 2 "an empty token file" "data.eval_path: $TMP/tok-empty.bin" "empty file" \
    -- "$SPEC" "${TOK[@]}" --set data.path="$TMP/tok.bin" --set data.eval_path="$TMP/tok-empty.bin"
  head -c 32 "$TMP/tok.bin" >"$TMP/tok-short.bin"
  expect 2 "a token file shorter than context + 1" "$TMP/tok-short.bin" "16 tokens" "model.context + 1 = 17" \
    -- "$SPEC" "${TOK[@]}" --set data.path="$TMP/tok-short.bin" --set data.eval_path="$TMP/tok.bin"
  printf 'Ge1:1 In the beginning God created the heaven and the earth.\nGe1:2 And the earth was without form.\n' >"$TMP/genesis.txt"
  expect 2 "a classifier split with no held-out verses" "data.path" "no held-out verses" \
    -- "$SPEC" --set model.type=gpt-classifier --set data.dataset=kjv --set data.path="$TMP/genesis.txt" \
    --set data.split=book --set train.batch_size=1 --steps 2 -q
  printf '{"optimizer": {"lr": 1e400}}\n' >"$TMP/big-number.json"
  expect 2 "a JSON number out of range (1e400)" "big-number.json: optimizer.lr" "out of range" -- "$TMP/big-number.json"
  { printf '{"name": "'; head -c 20000000 /dev/zero | tr '\0' a; } >"$TMP/unterminated.json"
  expect 2 "an unterminated 20 MB string" "unterminated.json: name" "not valid JSON" -- "$TMP/unterminated.json"
  [ "$(wc -c <"$TMP/out")" -lt 1000 ] || fail "the error message echoes the 20 MB string ($(wc -c <"$TMP/out") bytes)"
  expect 2 "runtime.cuda_workers on a CPU build" "runtime.cuda_workers" "no CUDA" \
    -- "$SPEC" --set runtime.cuda_workers=1 --steps 2 "${SMALL[@]}"
  expect 2 "zenflow.select_interval beyond INT32_MAX" "zenflow.select_interval" "outside" \
    -- "$SPEC" --strategy zenflow --set zenflow.select_strategy=epoch \
    --set zenflow.select_interval=4611686018427387904 --steps 2 "${SMALL[@]}"
  printf '{"optimizer": {"type": "AdamW", "params": {"betas": [0.9, 1.5]}}}\n' >"$TMP/ds-betas.json"
  expect 2 "DeepSpeed betas: the DeepSpeed file is named" "ds-betas.json: optimizer.params.betas[1]" \
    -- "$SPEC" --deepspeed "$TMP/ds-betas.json" --steps 2 "${SMALL[@]}"
  printf '{"train_batch_size": 100000}\n' >"$TMP/ds-batch.json"
  expect 2 "DeepSpeed batch size: the DeepSpeed file is named" "ds-batch.json: train_batch_size" "exceeds" \
    -- "$SPEC" --deepspeed "$TMP/ds-batch.json" --steps 2 "${SMALL[@]}"
  python3 - "$TMP/small.safetensors" "$TMP/nan.safetensors" <<'PY' || fail "writing nan.safetensors"
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
name = sorted(k for k in h if k != "__metadata__")[0]
off = 8 + n + h[name]["data_offsets"][0]
b[off:off + 4] = struct.pack("<f", float("nan"))
open(sys.argv[2], "wb").write(b)
PY
  expect 2 "--init weights holding a NaN" "nan.safetensors" "NaN" \
    -- "$SPEC" --set 'model.hidden=[8]' --init "$TMP/nan.safetensors" --steps 2 "${SMALL[@]}"
  for o in --trace --trace-csv --metrics --save; do
    expect 2 "$o into a missing directory" "$o $TMP/no-such-dir/out" "does not exist" \
      -- "$SPEC" "$o" "$TMP/no-such-dir/out" --steps 2 "${SMALL[@]}"
    expect 2 "$o at a directory" "$o $TMP" "is a directory" -- "$SPEC" "$o" "$TMP" --steps 2 "${SMALL[@]}"
  done
  expect 2 "--trace at a FIFO" "--trace $TMP/text-fifo" "not a regular file" \
    -- "$SPEC" --trace "$TMP/text-fifo" --steps 2 "${SMALL[@]}"
  expect 2 "--checkpoint-dir at a file" "--checkpoint-dir $SPEC" "not a directory" \
    -- "$SPEC" --checkpoint-dir "$SPEC" --steps 2 "${SMALL[@]}"
  expect 2 "--checkpoint-dir under a file" "--checkpoint-dir $SPEC/ck" \
    -- "$SPEC" --checkpoint-dir "$SPEC/ck" --steps 2 "${SMALL[@]}"
  expect 0 "--checkpoint-dir created where missing" -- "$SPEC" --checkpoint-dir "$TMP/new/ck" --steps 2 "${SMALL[@]}"
  [ -d "$TMP/new/ck" ] || fail "--checkpoint-dir $TMP/new/ck was not created"

  # ---- a tiny valid run and its metrics
  M=$TMP/metrics.json
  expect 0 "tiny valid run" -- "$SPEC" --steps 5 "${SMALL[@]}" --metrics "$M"
  [ -s "$M" ] || fail "tiny valid run: no metrics file $M"
  # damaged StarPU calibration files (a run killed while writing them): redone, not an abort (134)
  bus=$STARPU_HOME/.starpu/sampling/bus
  ls "$bus"/*.affinity >/dev/null 2>&1 || fail "no calibration files in $bus after a run"
  for f in "$bus"/*.affinity; do : >"$f"; done
  for f in "$bus"/*.config; do echo garbage >"$f"; done
  expect 0 "damaged StarPU calibration files are removed and redone" "calibration file" "damaged" \
    -- "$SPEC" --steps 2 "${SMALL[@]}" --sched dmda
  for f in "$STARPU_HOME"/.starpu/sampling/codelets/*/*; do echo "xx yy" >"$f"; done
  expect 0 "damaged StarPU performance models are removed" "does not start with the model version" \
    -- "$SPEC" --steps 2 "${SMALL[@]}" --sched dmda
  expect 0 "a run after the repair" -- "$SPEC" --steps 2 "${SMALL[@]}"
  [ ! -s "$TMP/out" ] || fail "the calibration files were not redone: $(cat "$TMP/out")"
  [ ! -s "$TMP/out" ] || fail "tiny valid run: -q printed output"
  KEYS="strategy sched steps step_time_s.median device_busy_s_per_step stall_fraction bytes.device_to_host final.eval_accuracy throughput.samples_per_s cpu_seconds cpu_over_wall"
  if command -v python3 >/dev/null 2>&1; then
    python3 - "$M" $KEYS >"$TMP/out" 2>&1 <<'PY' || fail "metrics JSON check"
import json, sys
m = json.load(open(sys.argv[1]))
for key in sys.argv[2:]:
    v = m
    for part in key.split("."):
        if not isinstance(v, dict) or part not in v:
            sys.exit("metrics lack " + key)
        v = v[part]
assert m["steps"] == 5, "steps %r" % m["steps"]
assert m["strategy"] == "device-adam" and m["sched"] == "zf-deadline", (m["strategy"], m["sched"])
assert m["cpu_seconds"] > 0 and m["cpu_over_wall"] > 0, (m["cpu_seconds"], m["cpu_over_wall"])
assert 0.0 <= m["final"]["eval_accuracy"] <= 1.0
assert m["step_time_s"]["median"] > 0
PY
  else
    for k in $KEYS; do
      grep -qF "\"${k##*.}\"" "$M" || fail "metrics lack $k"
    done
  fi
  echo "ok: metrics JSON has the documented keys"
  PASSED=$((PASSED + 1))
else
  echo "skipped: data, weights and run checks ($DATA not installed)"
fi

# tools/zf's usage: the comment block at its top, not the script (it prints the lines up to its
# `set` line: a changed `set` line once made it print all 300 lines of the script).
USAGE=$(bash "$SRC/tools/zf" --help 2>&1)
n=$(printf '%s\n' "$USAGE" | wc -l)
[ "$n" -ge 5 ] && [ "$n" -le 40 ] || fail "tools/zf --help: $n lines, expected the usage block (5-40 lines)"
printf '%s\n' "$USAGE" | grep -F "bash tools/zf main" >/dev/null || fail "tools/zf --help does not show 'bash tools/zf main'"
printf '%s\n' "$USAGE" | grep -E "pipefail|^ *case " >/dev/null && fail "tools/zf --help prints the script's code"
echo "ok: tools/zf --help prints its usage ($n lines)"
PASSED=$((PASSED + 1))

echo "cli_test: all $PASSED checks passed"
exit 0
