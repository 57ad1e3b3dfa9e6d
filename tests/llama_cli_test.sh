#!/usr/bin/env bash
# zenflow-run on a Hugging Face Llama directory (graphs/specs/llama-tiny-test.json: the config.json of
# graphs/specs/llama-tiny, model.init "random" from model.init_seed, on the KJV's bytes as token ids from
# tools/kjv-tokens.pl): each strategy, bf16, clipping with accumulation, ZeRO stage 3 (the same eval
# loss as stage 0), a bitwise resume
# (--checkpoint-dir, --resume: the saved tensors equal), --save-hf (config.json byte for byte, and
# saved again from a resumed 0-step run, the same tensors), and the bad inputs exiting 2 naming the
# field (model.path, model.context, a bert config, --save-hf on a GPT); a GPT-2 directory trains with zenflow
# and is saved back. Prints "FAIL: ..." and exits 1.
# Usage: llama_cli_test.sh ZENFLOW_RUN SOURCE_DIR KJV_TXT
set -u
[ $# -eq 3 ] || { echo "usage: $0 ZENFLOW_RUN SOURCE_DIR KJV_TXT" >&2; exit 1; }
BIN=$1 SRC=$2 KJV=$3
[ -f "$KJV" ] || { echo "SKIP: $KJV missing (bash tools/zf setup writes it)"; exit 77; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/zf_llama_cli_XXXXXX") || { echo "FAIL: mktemp"; exit 1; }
trap 'rm -rf "$TMP"' EXIT
export STARPU_HOME=$TMP/starpu-home STARPU_SILENT=1 STARPU_WORKERS_NOBIND=1
mkdir -p "$STARPU_HOME"
perl "$SRC/tools/kjv-tokens.pl" "$KJV" "$TMP" >/dev/null || { echo "FAIL: kjv-tokens.pl"; exit 1; }
SPEC=$SRC/graphs/specs/llama-tiny-test.json
COMMON=(--set "model.path=\"$SRC/graphs/specs/llama-tiny\"" --set "data.path=\"$TMP/kjv-train.bin\""
        --set "data.eval_path=\"$TMP/kjv-eval.bin\"" -q)
fail() { echo "FAIL: $*"; exit 1; }

# eval loss of a run's metrics
loss() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["final"]["eval_loss"])' "$1"; }
run_ok() {  # NAME ARGS...: exit 0 and an eval loss below ln 256 = 5.55 (the start's)
  local name=$1; shift
  "$BIN" "$SPEC" "${COMMON[@]}" --metrics "$TMP/$name.json" "$@" >"$TMP/$name.out" 2>&1 ||
    { cat "$TMP/$name.out"; fail "$name exited $?"; }
  local l; l=$(loss "$TMP/$name.json")
  echo "$name: eval_loss $l"
  python3 -c "import sys; sys.exit(0 if float('$l') < 5.0 else 1)" || fail "$name: eval loss $l not below 5.0"
}
run_ok device-adam
run_ok zero-offload --strategy zero-offload
run_ok zenflow --strategy zenflow
run_ok bf16 --set precision=\"bf16\"
run_ok clip-accum --strategy zero-offload --set gradient_clipping=0.5 --set train.gradient_accumulation_steps=2
# evaluation during the run (train.eval_every) changes no step: the same final eval loss; in the
# metrics with each step's loss
run_ok eval-every --set train.eval_every=10
[ "$(loss "$TMP/eval-every.json")" = "$(loss "$TMP/device-adam.json")" ] || fail "train.eval_every changed the run"
python3 - "$TMP/eval-every.json" <<'EOF' || fail "eval-every: metrics' evals / loss_history"
import json, sys
m = json.load(open(sys.argv[1]))
assert [e["step"] for e in m["evals"]] == [10, 20, 30], m["evals"]
assert m["loss_history"]["first_step"] == 0 and len(m["loss_history"]["loss"]) == 40, m["loss_history"]
assert m["final"]["train_loss_last_step"] == m["loss_history"]["loss"][-1]
EOF
# ZeRO stage 3 (the layer groups: embedding, blocks, norm and head) trains what stage 0 trains
for st in zero-offload zenflow; do
  run_ok "$st-stage3" --strategy $st --set zero_optimization.stage=3
  [ "$(loss "$TMP/$st-stage3.json")" = "$(loss "$TMP/$st.json")" ] || fail "$st: stage 3's eval loss differs from stage 0's"
done

# resume: 40 steps straight vs 20 + resumed 20, --save-hf of each: the same bytes
"$BIN" "$SPEC" "${COMMON[@]}" --strategy zenflow --save-hf "$TMP/full" >/dev/null 2>&1 || fail "full run"
"$BIN" "$SPEC" "${COMMON[@]}" --strategy zenflow --steps 20 --checkpoint-dir "$TMP/ck" >/dev/null 2>&1 ||
  fail "first half"
"$BIN" "$SPEC" "${COMMON[@]}" --strategy zenflow --resume "$TMP/ck" --save-hf "$TMP/resumed" >/dev/null 2>&1 ||
  fail "resumed half"
cmp "$TMP/full/model.safetensors" "$TMP/resumed/model.safetensors" || fail "resumed run's tensors differ"
cmp "$TMP/full/config.json" "$SRC/graphs/specs/llama-tiny/config.json" || fail "--save-hf changed config.json"
echo "resume: bitwise, --save-hf config.json unchanged"

# bad inputs: exit 2 and the field named
expect2() {  # WHAT PATTERN ARGS...
  local what=$1 pat=$2; shift 2
  "$BIN" "$@" >"$TMP/bad.out" 2>&1
  local rc=$?
  [ $rc -eq 2 ] || { cat "$TMP/bad.out"; fail "$what: exit $rc, expected 2"; }
  grep -q -- "$pat" "$TMP/bad.out" || { cat "$TMP/bad.out"; fail "$what: no '$pat' in the message"; }
  echo "$what: exit 2 ($pat)"
}
expect2 "missing model.path" "model.path" "$SPEC" "${COMMON[@]}" --set "model.path=\"$TMP/nowhere\""
# no silent random weights: a directory without weights needs model.init "random" (or --init random)
expect2 "no weights" "$SRC/graphs/specs/llama-tiny: no weights file the reader recognises (found: config.json;" \
  "$SPEC" "${COMMON[@]}" --set 'model.init="weights"'
"$BIN" "$SPEC" "${COMMON[@]}" --set 'model.init="weights"' --init random --steps 1 >/dev/null 2>&1 ||
  fail "--init random: exit $?"
expect2 "model.init on a GPT" "model.init" "$SRC/graphs/specs/gpt-kjv-tokens.json" \
  --set "data.path=\"$TMP/kjv-train.bin\"" --set "data.eval_path=\"$TMP/kjv-eval.bin\"" --set 'model.init="random"'
expect2 "context too long" "model.context" "$SPEC" "${COMMON[@]}" --set model.context=65
mkdir -p "$TMP/g2" && printf '{"model_type": "gpt2", "vocab_size": 256, "n_embd": 16, "n_layer": 1, "n_head": 2}' \
  >"$TMP/g2/config.json"
# a GPT-2 directory trains through the same spec (models/hf/gpt2_hf.hpp), and --save-hf writes it back
run_ok gpt2-zenflow --strategy zenflow --set "model.path=\"$TMP/g2\"" --save-hf "$TMP/g2-out"
cmp "$TMP/g2/config.json" "$TMP/g2-out/config.json" || fail "gpt2: --save-hf changed config.json"
[ -s "$TMP/g2-out/model.safetensors" ] || fail "gpt2: --save-hf wrote no model.safetensors"
mkdir -p "$TMP/bert" && printf '{"model_type": "bert", "vocab_size": 256}' >"$TMP/bert/config.json"
expect2 "model_type bert" "model_type" "$SPEC" "${COMMON[@]}" --set "model.path=\"$TMP/bert\""
expect2 "--save-hf on a GPT" "--save-hf" "$SRC/graphs/specs/gpt-kjv-tokens.json" --set "data.path=\"$TMP/kjv-train.bin\"" \
  --set "data.eval_path=\"$TMP/kjv-eval.bin\"" --save-hf "$TMP/g"
expect2 "--save-dtype" "--save-dtype" "$SPEC" "${COMMON[@]}" --save-hf "$TMP/x" --save-dtype f64
# --save-hf checked before the first step (issue 46: these trained to the end, then failed)
touch "$TMP/a-file" && ln -s "$TMP/nowhere/dir" "$TMP/dangling" && mkdir -p "$TMP/ck3" "$TMP/out3"
expect2 "--save-hf under /proc" "--save-hf /proc/zf-x.*not writable" "$SPEC" "${COMMON[@]}" --save-hf /proc/zf-x
expect2 "--save-hf under a file" "--save-hf $TMP/a-file/x.*not a directory" "$SPEC" "${COMMON[@]}" --save-hf "$TMP/a-file/x"
expect2 "--save-hf a dangling link" "--save-hf $TMP/dangling.*dangling" "$SPEC" "${COMMON[@]}" --save-hf "$TMP/dangling"
expect2 "--save-hf in no directory" "--save-hf $TMP/no/such.*does not exist" "$SPEC" "${COMMON[@]}" --save-hf "$TMP/no/such"
expect2 "--save-hf = --checkpoint-dir" "--save-hf" "$SPEC" "${COMMON[@]}" --save-hf "$TMP/ck2" --checkpoint-dir "$TMP/ck2"
expect2 "--save-hf inside --checkpoint-dir" "contains --save-hf" "$SPEC" "${COMMON[@]}" --save-hf "$TMP/ck3/hf" \
  --checkpoint-dir "$TMP/ck3"
expect2 "--save = --save-hf" "--save $TMP/out1.*same path as --save-hf" "$SPEC" "${COMMON[@]}" --save-hf "$TMP/out1" \
  --save "$TMP/out1"
expect2 "--trace = --save-hf" "--trace $TMP/out2.*same path as --save-hf" "$SPEC" "${COMMON[@]}" --save-hf "$TMP/out2" \
  --trace "$TMP/out2"
expect2 "--metrics inside --save-hf" "is inside --save-hf" "$SPEC" "${COMMON[@]}" --save-hf "$TMP/out3" \
  --metrics "$TMP/out3/m.json"
expect2 "--save-hf ''" "--save-hf.*empty path" "$SPEC" "${COMMON[@]}" --save-hf ""
expect2 "--checkpoint-every 2^64" "--checkpoint-every" "$SPEC" "${COMMON[@]}" --checkpoint-every 18446744073709551616
for d in out1 out2 ck3/hf; do [ ! -e "$TMP/$d" ] || fail "$d was written by a refused run"; done
[ -z "$(ls -A "$TMP/out3")" ] || fail "out3 was written by a refused run"
echo "PASS"
