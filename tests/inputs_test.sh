#!/usr/bin/env bash
# Hostile inputs of the Hugging Face directory commands (issue 46): zenflow-run tokenize's output
# and empty results, config.json as a FIFO, a directory or a symbolic link loop (train, tokenize,
# generate), and the further attacks of the issue's closing note: permissions, sizes past 32 and
# 64 bits, files that change while read. Each case must exit 2 naming the file or the option, and
# never hang (every command has a timeout). Prints "FAIL: ..." and exits 1.
# Usage: inputs_test.sh ZENFLOW_RUN SOURCE_DIR
set -u
[ $# -eq 2 ] || { echo "usage: $0 ZENFLOW_RUN SOURCE_DIR" >&2; exit 1; }
BIN=$1 SRC=$2
TMP=$(mktemp -d "${TMPDIR:-/tmp}/zf_inputs_XXXXXX") || { echo "FAIL: mktemp"; exit 1; }
trap 'rm -rf "$TMP"' EXIT
export STARPU_HOME=$TMP/starpu-home STARPU_SILENT=1 STARPU_WORKERS_NOBIND=1
mkdir -p "$STARPU_HOME"
PASSED=0
fail() { echo "FAIL: $*"; for f in "$TMP"/out "$TMP"/err; do echo "---- $f"; head -c 2000 "$f" 2>/dev/null; done; exit 1; }
# expect NAME TEXT... -- COMMAND...: exit 2 within 60 s, stderr holding every TEXT
expect() {
  local name=$1 texts=() rc=0
  shift
  while [ "$1" != -- ]; do texts+=("$1"); shift; done
  shift
  timeout 60 "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
  [ $rc -eq 2 ] || fail "$name: exit $rc, expected 2"
  for t in "${texts[@]}"; do grep -qF -- "$t" "$TMP/err" || fail "$name: stderr does not say '$t'"; done
  echo "inputs_test: $name: exit 2: $(head -n 1 "$TMP/err")"
  PASSED=$((PASSED + 1))
}
TOK=$SRC/graphs/tokenizers/kjv-bpe/tokenizer.json
M=$TMP/model
mkdir -p "$M" && cp "$TOK" "$M/"
printf '%s\n' '{"model_type": "llama", "vocab_size": 4096, "hidden_size": 32, "intermediate_size": 48,
  "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
  "bos_token_id": 4094, "eos_token_id": 4095}' >"$M/config.json"
echo "In the beginning God created the heaven and the earth." >"$TMP/text.txt"
: >"$TMP/empty.txt"
cp "$SRC/graphs/specs/llama-tiny-test.json" "$TMP/spec.json"

# tokenize: outputs found unwritable before the work, an empty result refused, not written
expect "tokenize --out under /proc" "--out /proc/zf-x.bin" "not writable" -- \
  "$BIN" tokenize --model "$M" --text "$TMP/text.txt" --out /proc/zf-x.bin
expect "tokenize --out ''" "--out" "empty path" -- "$BIN" tokenize --model "$M" --text "$TMP/text.txt" --out ""
mkfifo "$TMP/fifo-out"
expect "tokenize --out a FIFO" "--out $TMP/fifo-out" "not a regular file" -- \
  "$BIN" tokenize --model "$M" --text "$TMP/text.txt" --out "$TMP/fifo-out"
expect "tokenize an empty text, no BOS, no EOS" "--text $TMP/empty.txt" "no tokens" -- \
  "$BIN" tokenize --model "$M" --text "$TMP/empty.txt" --out "$TMP/e.bin" --no-bos --no-eos
[ ! -e "$TMP/e.bin" ] || fail "an empty token file was written"
timeout 60 "$BIN" tokenize --model "$M" --text "$TMP/empty.txt" --out "$TMP/e.bin" -q >"$TMP/out" 2>"$TMP/err" ||
  fail "an empty text with BOS and EOS: exit $?"
[ "$(stat -c %s "$TMP/e.bin")" = 4 ] || fail "an empty text with BOS and EOS: not 2 ids"
PASSED=$((PASSED + 1))

# an output that is an input (by name or through a link): refused, the input left as it was
cp "$TMP/text.txt" "$TMP/keep.txt" && ln -s keep.txt "$TMP/keep-link.txt"
expect "tokenize --out = --text" "--out $TMP/keep.txt" "is the input --text" -- \
  "$BIN" tokenize --model "$M" --text "$TMP/keep.txt" --out "$TMP/keep.txt"
expect "tokenize --out a link to --text" "is the input --text" -- \
  "$BIN" tokenize --model "$M" --text "$TMP/keep.txt" --out "$TMP/keep-link.txt"
cmp -s "$TMP/keep.txt" "$TMP/text.txt" || fail "the input text was changed"
timeout 60 "$BIN" tokenize --model "$M" --text "$TMP/text.txt" --out "$TMP/train.bin" -q || fail "tokenize: exit $?"
expect "train --save = data.path" "--save $TMP/train.bin" "is the input" "data.path" -- \
  "$BIN" "$SRC/graphs/specs/llama-tiny-test.json" --set "model.path=\"$M\"" --set "data.path=\"$TMP/train.bin\"" \
  --set "data.eval_path=\"$TMP/train.bin\"" --save "$TMP/train.bin" -q
expect "train --metrics = the spec" "--metrics" "is the input spec" -- \
  "$BIN" "$TMP/spec.json" --set "model.path=\"$M\"" --set "data.path=\"$TMP/train.bin\"" \
  --set "data.eval_path=\"$TMP/train.bin\"" --metrics "$TMP/spec.json" -q
cmp -s "$TMP/spec.json" "$SRC/graphs/specs/llama-tiny-test.json" || fail "the spec was changed"

# config.json that is no regular file: named as what it is, not "has no config.json"
mk() { mkdir -p "$TMP/$1" && cp "$TOK" "$TMP/$1/"; }
mk fifo && mkfifo "$TMP/fifo/config.json"
mk dir && mkdir "$TMP/dir/config.json"
mk loop && ln -s config.json "$TMP/loop/config.json"
mk dangling && ln -s nowhere.json "$TMP/dangling/config.json"
for kind in fifo:"FIFO" dir:"a directory" loop:"loop of symbolic links" dangling:"a symbolic link to nothing"; do
  d=${kind%%:*} what=${kind#*:}
  expect "generate, config.json $d" "$TMP/$d/config.json" "$what" -- "$BIN" generate --model "$TMP/$d" --prompt x
  expect "tokenize, config.json $d" "$TMP/$d/config.json" "$what" -- \
    "$BIN" tokenize --model "$TMP/$d" --text "$TMP/text.txt" --out "$TMP/t.bin"
  expect "train, config.json $d" "$TMP/$d/config.json" "$what" -- \
    "$BIN" "$SRC/graphs/specs/llama-tiny-test.json" --set "model.path=\"$TMP/$d\"" \
    --set "data.path=\"$TMP/t.bin\"" --set "data.eval_path=\"$TMP/t.bin\"" -q
done
echo "inputs_test: all $PASSED checks passed"
