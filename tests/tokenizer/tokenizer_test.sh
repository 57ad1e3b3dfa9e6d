#!/usr/bin/env bash
# The tokenizers (models/tokenizer/, docs/tokenizers.md) against Hugging Face's tokenizers library
# (npm's @anush008/tokenizers, a Node build of HF's Rust library, installed into WORK/npm when
# missing) and Debian's python3-sentencepiece, on the KJV text and tests/tokenizer/stress.txt
# (CJK, emoji, combining marks, RTL, NBSP and other spaces, whitespace runs, special tokens, bytes
# no vocabulary has): ids and decoded text must be equal for every tokenizer.json variant of
# hf_reference.js and for the sentencepiece model. Then zenflow-run tokenize: its token files
# (raw uint16, llm.c uint16 and uint32, BOS/EOS from config.json) and its exit 2 on bad input.
# Skipped (77), saying why, only where npm cannot install the library.
#   bash tests/tokenizer/tokenizer_test.sh ZF_TOKENIZER_TOOL ZENFLOW_RUN SOURCE_DIR WORK_DIR
set -euo pipefail
tool="$1" run="$2" src="$3"
work="$(mkdir -p "$4" && cd "$4" && pwd)"
here="$src/tests/tokenizer"
py=/usr/bin/python3  # Debian's, with python3-sentencepiece
say() { echo "tokenizer_test: $*"; }
fail() { say "FAIL: $*"; exit 1; }

# Hugging Face's library: installed once into the build tree (npm's registry), then reused
npm_dir="$work/npm"
if [ ! -f "$npm_dir/node_modules/@anush008/tokenizers/package.json" ]; then
  command -v npm >/dev/null && command -v node >/dev/null ||
    { say "SKIP: no npm/node to install @anush008/tokenizers (Hugging Face's tokenizers for Node)"; exit 77; }
  mkdir -p "$npm_dir"
  say "installing @anush008/tokenizers@0.6.0 (tokenizers 0.22.2) into $npm_dir"
  npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error @anush008/tokenizers@0.6.0 >"$work/npm.log" 2>&1 ||
    { say "SKIP: npm could not install @anush008/tokenizers: $(tail -n 3 "$work/npm.log" | tr '\n' ' ')"; exit 77; }
fi
"$py" -c 'import sentencepiece' 2>/dev/null || fail "$py has no sentencepiece module (Debian: python3-sentencepiece; bash tools/zf setup)"

rm -rf "$work/run" && mkdir -p "$work/run"
w="$work/run"
kjv=/var/tmp/zenflow/kjv.txt  # tools/zf setup writes it; else made here from bible-kjv
if [ ! -s "$kjv" ]; then
  command -v bible >/dev/null || fail "no $kjv and no bible(1) (Debian: bible-kjv; bash tools/zf setup)"
  kjv="$w/kjv.txt"
  bible -f "Genesis 1:1-Revelation 22:21" >"$kjv"
fi
cp "$kjv" "$w/kjv.txt"
# The KJV in texts of 1000 verses (each encoded alone, as a whole file is: HF's encode of one
# 4.4 MB string takes 3-4 s, of a Llama 2 tokenizer's one 4.4 MB word longer): every variant on
# the first and the stress file, the shipped tokenizer, the Llama 2 one and the sentencepiece
# model on all 32.
mkdir -p "$w/kjv" && (cd "$w/kjv" && split -l 1000 -d -a 2 --additional-suffix=.txt "$w/kjv.txt" kjv-)
small=("$here/stress.txt" "$w/kjv/kjv-00.txt")
rest=("$w"/kjv/kjv-*.txt)
rest=("${rest[@]:1}")
full="kjv-llama3 llama2-legacy"
t0=$SECONDS

# 1. tokenizer.json variants: Hugging Face's ids and decodes, then ours
hf() { NODE_PATH="$npm_dir/node_modules" node "$here/hf_reference.js" "$src" "$w" "$@" 2>>"$w/hf.log" ||
         { cat "$w/hf.log"; fail "hf_reference.js failed"; }; }
hf "${small[@]}"
hf "--only=${full// /,}" "${rest[@]}"
rc=0
for dir in "$w"/models/*/; do
  v="$(basename "$dir")"
  texts=("${small[@]}")
  [[ " $full " == *" $v "* ]] && texts+=("${rest[@]}")
  "$tool" "$dir" "$w/zf/$v" "${texts[@]}" 2>>"$w/zf.log" || { cat "$w/zf.log"; fail "zf_tokenizer_tool on $v failed"; }
  "$py" "$here/compare.py" "$v" "$w/hf/$v" "$w/zf/$v" || rc=1
done
# 2. tokenizer.model: sentencepiece's ids and decodes, then ours
sp_dir="$here/fixtures/sp-kjv"
"$py" "$here/sp_reference.py" "$sp_dir/tokenizer.model" "$w/sp/sp-kjv" "${small[@]}" "${rest[@]}" 2>"$w/sp.log" ||
  { cat "$w/sp.log"; fail "sp_reference.py failed"; }
"$tool" "$sp_dir" "$w/zf/sp-kjv" "${small[@]}" "${rest[@]}" 2>>"$w/zf.log" || { cat "$w/zf.log"; fail "zf_tokenizer_tool on sp-kjv failed"; }
"$py" "$here/compare.py" sp-kjv "$w/sp/sp-kjv" "$w/zf/sp-kjv" || rc=1
((rc == 0)) || fail "ids or decoded text differ from the reference (above)"
say "every tokenizer equals its reference ($((SECONDS - t0)) s)"

# 3. zenflow-run tokenize: token files (layout: docs/tokenizers.md, "Token files")
bash "$here/tokenize_cli_test.sh" "$run" "$w" "$here" "$py"
