#!/usr/bin/env bash
# zenflow-run tokenize (part of tokenizer_test.sh, after the variants and references are made in
# WORK): the token files' layouts against the reference ids, BOS/EOS from config.json, and exit 2
# naming the file and the field on bad input.
#   bash tokenize_cli_test.sh ZENFLOW_RUN WORK TEST_DIR PYTHON
set -euo pipefail
run="$1" w="$2" here="$3" py="$4"
say() { echo "tokenize_cli_test: $*"; }
fail() { say "FAIL: $*"; exit 1; }
c="$w/cli"
mkdir -p "$c"
stress="$here/stress.txt"

# check FILE FORMAT REF_IDS [PREFIX_IDS] [SUFFIX_IDS]: the file is FORMAT (raw16, llmc16, llmc32)
# holding PREFIX + REF + SUFFIX
check() {
  "$py" - "$@" <<'PY' || fail "$1: not the expected token file (above)"
import struct, sys
path, fmt, ref = sys.argv[1:4]
want = [int(x) for x in sys.argv[4].split()] if len(sys.argv) > 4 else []
want += [int(x) for x in open(ref).read().split()]
want += [int(x) for x in sys.argv[5].split()] if len(sys.argv) > 5 else []
data = open(path, "rb").read()
if fmt == "raw16":
    got = list(struct.unpack(f"<{len(data) // 2}H", data))
else:
    magic, version, count = struct.unpack("<3i", data[:12])
    expect = (20240520, 1, 2) if fmt == "llmc16" else (20240801, 7, 4)
    if (magic, version) != expect[:2] or len(data) != 1024 + count * expect[2]:
        sys.exit(f"{path}: header {magic} {version} {count}, {len(data)} bytes; expected {expect[:2]} and {count} tokens of {expect[2]} bytes")
    got = list(struct.unpack(f"<{count}{'H' if fmt == 'llmc16' else 'I'}", data[1024:]))
if got != want:
    k = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))
    sys.exit(f"{path}: {len(got)} ids, expected {len(want)}; first difference at {k}")
print(f"tokenize_cli_test: {path.split('/')[-1]}: {fmt}, {len(got)} ids as expected")
PY
}

# 1. raw uint16 with BOS and EOS from config.json
m="$c/llama3"
cp -r "$w/models/kjv-llama3" "$m"
echo '{"bos_token_id": 4094, "eos_token_id": 4095, "vocab_size": 4096}' >"$m/config.json"
"$run" tokenize --model "$m" --text "$stress" --out "$c/a.bin" | tee "$c/a.log"
grep -q "BOS, EOS" "$c/a.log" || fail "the summary line does not mention BOS and EOS"
check "$c/a.bin" raw16 "$w/hf/kjv-llama3/stress.txt.ids" 4094 4095
# 2. llm.c's uint16 header on request, without BOS/EOS
"$run" tokenize --model "$m" --text "$stress" --out "$c/b.bin" --llmc --no-bos --no-eos -q
check "$c/b.bin" llmc16 "$w/hf/kjv-llama3/stress.txt.ids"
# 3. more than 65536 ids: llm.c's uint32 format
"$run" tokenize --model "$w/models/kjv-wide" --text "$stress" --out "$c/c.bin" -q
check "$c/c.bin" llmc32 "$w/hf/kjv-wide/stress.txt.ids"
grep -q ' 70000 ' "$w/hf/kjv-wide/stress.txt.ids" || fail "the stress text does not reach id 70000"
# 4. tokenizer.model (no tokenizer.json), eos_token_id a list, --no-eos
s="$c/sp"
mkdir -p "$s"
cp "$here/fixtures/sp-kjv/tokenizer.model" "$s/"
echo '{"bos_token_id": 1, "eos_token_id": [2, 1]}' >"$s/config.json"
"$run" tokenize --model "$s" --text "$w/kjv/kjv-00.txt" --out "$c/d.bin" --no-eos
check "$c/d.bin" raw16 "$w/sp/sp-kjv/kjv-00.txt.ids" 1

# 5. bad input: exit 2, the message naming the file and the field
bad() {  # bad NAME EXPECTED_TEXT... -- ARGS: zenflow-run tokenize ARGS (--out added) must exit 2 saying every EXPECTED_TEXT
  local name="$1" expect=() rc=0
  shift
  while [ "$1" != -- ]; do expect+=("$1"); shift; done
  shift
  [[ " $* " == *" --out "* ]] || set -- "$@" --out "$c/bad.bin"
  "$run" tokenize "$@" >"$c/bad.log" 2>&1 || rc=$?
  ((rc == 2)) || { cat "$c/bad.log"; fail "$name: exit $rc, expected 2"; }
  for e in "${expect[@]}"; do
    grep -qF -- "$e" "$c/bad.log" || { cat "$c/bad.log"; fail "$name: the message does not say '$e'"; }
  done
  say "$name: exit 2: $(head -n 1 "$c/bad.log")"
}
mk() {  # mk NAME PYTHON_EDIT: a copy of kjv-llama3 with tokenizer.json edited (j: the JSON)
  mkdir -p "$c/$1"
  "$py" -c "import json, sys; j = json.load(open(sys.argv[1])); $2; json.dump(j, open(sys.argv[2], 'w'))" \
    "$w/models/kjv-llama3/tokenizer.json" "$c/$1/tokenizer.json"
}
bad "no directory" "$c/nowhere" "expected a model directory" -- --model "$c/nowhere" --text "$stress"
mkdir -p "$c/empty"
bad "no tokenizer" "$c/empty" "no tokenizer.json and no tokenizer.model" -- --model "$c/empty" --text "$stress"
mkdir -p "$c/trunc" && head -c 5000 "$m/tokenizer.json" >"$c/trunc/tokenizer.json"
bad "truncated JSON" "$c/trunc/tokenizer.json" "not valid JSON" -- --model "$c/trunc" --text "$stress"
mk no-merges "del j['model']['merges']"
bad "no merges" "no-merges/tokenizer.json: model.merges" "missing" -- --model "$c/no-merges" --text "$stress"
mk bad-merge "j['model']['merges'][5] = ['Ġth', 'nonexistent']"
bad "merge of an unknown token" "bad-merge/tokenizer.json: model.merges[5]" "nonexistent" "is not in model.vocab" -- --model "$c/bad-merge" --text "$stress"
mk bad-regex "j['pre_tokenizer']['pretokenizers'][0]['pattern']['Regex'] = r'\\w+'"
bad "another regex" "bad-regex/tokenizer.json: pre_tokenizer.pretokenizers[0].pattern.Regex" "GPT-2's, Llama 3's or Qwen2's" -- --model "$c/bad-regex" --text "$stress"
mk unigram "j['model']['type'] = 'Unigram'"
bad "a Unigram model" "unigram/tokenizer.json: model.type" "not supported" -- --model "$c/unigram" --text "$stress"
mk bad-id "j['added_tokens'][0]['id'] = 5000"
bad "an added token's id" "bad-id/tokenizer.json: added_tokens[0].id" "4094" -- --model "$c/bad-id" --text "$stress"
mk no-special "del j['added_tokens'][1]['special']"
bad "an added token's field" "no-special/tokenizer.json: added_tokens[1].special" "missing" -- --model "$c/no-special" --text "$stress"
mk bad-vocab "j['model']['vocab']['Ġthe'] = -3"
bad "a vocabulary id" "bad-vocab/tokenizer.json: model.vocab[\"Ġthe\"]" "expected an integer" -- --model "$c/bad-vocab" --text "$stress"
mkdir -p "$c/bad-sp" && head -c 3000 "$here/fixtures/sp-kjv/tokenizer.model" >"$c/bad-sp/tokenizer.model"
bad "a truncated tokenizer.model" "bad-sp/tokenizer.model" "not a sentencepiece model" -- --model "$c/bad-sp" --text "$stress"
printf 'abc\xff\xfedef' >"$c/latin1.txt"
bad "text not UTF-8" "--text $c/latin1.txt" "byte 3 is not valid UTF-8" -- --model "$m" --text "$c/latin1.txt"
mkdir -p "$c/bad-config" && cp "$m/tokenizer.json" "$c/bad-config/" && echo '{"bos_token_id": "<s>"}' >"$c/bad-config/config.json"
bad "a BOS id not a number" "bad-config/config.json: bos_token_id" "expected an integer" -- --model "$c/bad-config" --text "$stress"
mkdir -p "$c/big-eos" && cp "$m/tokenizer.json" "$c/big-eos/" && echo '{"eos_token_id": 99999}' >"$c/big-eos/config.json"
bad "an EOS id outside the vocabulary" "big-eos/config.json: eos_token_id" "99999 is not an id" -- --model "$c/big-eos" --text "$stress"
bad "an output in no directory" "--out $c/nodir/x.bin" "does not exist" -- --model "$m" --text "$stress" --out "$c/nodir/x.bin"
say "every token file as expected, every bad input exit 2"
