#!/usr/bin/env bash
# zenflow-run generate (docs/hf.md, "Generation") on tiny model directories with the shipped KJV
# tokenizer (graphs/tokenizers/kjv-bpe) and Hugging Face's init (--init random; no weight files: without
# --init random exit 2 listing the directory, a dangling symlink named): the prompt and
# its continuation on stdout, the tokens/s line on stderr, the same text for the same seed and any
# --threads, greedy the same whatever the seed, --max-new-tokens and the context's end obeyed, each
# family; exit 2 naming the option or the file on bad input. Prints "FAIL: ..." and exits 1 on any failure.
# Usage: generate_cli_test.sh ZENFLOW_RUN SOURCE_DIR
set -u
[ $# -eq 2 ] || { echo "usage: $0 ZENFLOW_RUN SOURCE_DIR" >&2; exit 1; }
BIN=$1 SRC=$2
TMP=$(mktemp -d "${TMPDIR:-/tmp}/zf_gen_XXXXXX") || { echo "FAIL: mktemp"; exit 1; }
trap 'rm -rf "$TMP"' EXIT
PASSED=0
fail() { echo "FAIL: $*"; for f in "$TMP"/out "$TMP"/err; do echo "---- $f"; cat "$f" 2>/dev/null; done; exit 1; }
gen() { timeout 300 "$BIN" generate --init random "$@" >"$TMP/out" 2>"$TMP/err"; }

# model DIR CONFIG_JSON: a directory with the KJV tokenizer and CONFIG_JSON, no weights
model() {
  mkdir -p "$1" && cp "$SRC/graphs/tokenizers/kjv-bpe/tokenizer.json" "$1/" && printf '%s\n' "$2" >"$1/config.json"
}
LLAMA='{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 4096, "hidden_size": 32,
  "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "max_position_embeddings": 64, "rope_theta": 10000.0, "bos_token_id": 4094, "eos_token_id": 4095}'
model "$TMP/llama" "$LLAMA"
model "$TMP/gpt2" '{"model_type": "gpt2", "vocab_size": 4096, "n_embd": 16, "n_layer": 2, "n_head": 2, "n_positions": 24,
  "bos_token_id": 4094, "eos_token_id": 4095}'
model "$TMP/qwen2" '{"model_type": "qwen2", "vocab_size": 4096, "hidden_size": 16, "intermediate_size": 24,
  "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 64,
  "tie_word_embeddings": true, "bos_token_id": 4094, "eos_token_id": 4095}'
PROMPT="In the beginning God created"

"$BIN" generate --help >"$TMP/out" 2>&1 || fail "--help exit $?"
for w in --model --prompt --max-new-tokens --temperature --top-p --seed "KV cache"; do
  grep -qF -- "$w" "$TMP/out" || fail "--help does not mention $w"
done
PASSED=$((PASSED + 1))

# sampled: the prompt first, then the continuation; the same seed the same text, another seed another
gen --model "$TMP/llama" --prompt "$PROMPT" --max-new-tokens 12 --seed 3 || fail "llama sampling: exit $?"
head -c ${#PROMPT} "$TMP/out" | grep -qxF "$PROMPT" || fail "stdout does not start with the prompt"
[ "$(wc -c <"$TMP/out")" -gt $((${#PROMPT} + 1)) ] || fail "no continuation"
grep -qE '^generate: 7 prompt tokens, 12 new \(stopped: max-new-tokens\);.*tokens/s.*seed 3$' "$TMP/err" ||
  fail "the stderr summary (7 prompt tokens: BOS and 6, 12 new, tokens/s, seed 3)"
grep -q "init random: initialised" "$TMP/err" || fail "no note that the model was initialised"
cp "$TMP/out" "$TMP/a"
gen --model "$TMP/llama" --prompt "$PROMPT" --max-new-tokens 12 --seed 3 || fail "second run: exit $?"
cmp -s "$TMP/a" "$TMP/out" || fail "the same seed gave another text"
gen --model "$TMP/llama" --prompt "$PROMPT" --max-new-tokens 12 --seed 4 || fail "seed 4: exit $?"
cmp -s "$TMP/a" "$TMP/out" && fail "seeds 3 and 4 gave the same text (4096 nearly uniform ids, 12 draws)"
PASSED=$((PASSED + 1))

# greedy: the seed does not matter; top-p keeps at least the most probable token
gen --model "$TMP/llama" --prompt "$PROMPT" --temperature 0 --max-new-tokens 10 --seed 1 || fail "greedy: exit $?"
cp "$TMP/out" "$TMP/g"
gen --model "$TMP/llama" --prompt "$PROMPT" --temperature 0 --max-new-tokens 10 --seed 2 || fail "greedy 2: exit $?"
cmp -s "$TMP/g" "$TMP/out" || fail "greedy text depends on the seed"
gen --model "$TMP/llama" --prompt "$PROMPT" --temperature 1e-3 --top-p 1e-6 --max-new-tokens 10 --seed 9 ||
  fail "top-p 1e-6: exit $?"
cmp -s "$TMP/g" "$TMP/out" || fail "top-p 1e-6 (only the most probable token) is not the greedy text"
gen --model "$TMP/llama" --prompt "$PROMPT" --max-new-tokens 12 --seed 3 --threads 1 || fail "--threads 1: exit $?"
cmp -s "$TMP/a" "$TMP/out" || fail "--threads 1 gave another text than the default"
gen --model "$TMP/llama" --prompt "$PROMPT" --max-new-tokens 12 --seed 3 --threads 3 || fail "--threads 3: exit $?"
cmp -s "$TMP/a" "$TMP/out" || fail "--threads 3 gave another text than the default"
PASSED=$((PASSED + 1))

# --template alpaca: the instruction rendered in Alpaca's template (the one instruction data trains on),
# printed as the model sees it; --input selects the template with an input (a Llama of 256 positions: the
# template alone is 65 tokens)
model "$TMP/llama256" "${LLAMA/\"max_position_embeddings\": 64/\"max_position_embeddings\": 256}"
gen --model "$TMP/llama256" --template alpaca --prompt "Quote John 11:35." --max-new-tokens 3 || fail "alpaca: exit $?"
grep -qF "Below is an instruction that describes a task. Write a response that appropriately completes the request." \
  "$TMP/out" || fail "--template alpaca: stdout does not start with Alpaca's template"
grep -qF "### Instruction:" "$TMP/out" && grep -q "^### Response:" "$TMP/out" || fail "--template alpaca: no sections"
gen --model "$TMP/llama256" --template alpaca --prompt "Name the book." --input "Jesus wept." --max-new-tokens 2 ||
  fail "alpaca with --input: exit $?"
grep -qF "### Input:" "$TMP/out" || fail "--input: not the template with an input"
PASSED=$((PASSED + 1))

# --template chat: the user's message (after --system's) in tokenizer_config.json's chat_template with the
# generation prompt, as data.dataset "chat" renders the turns before a reply; the template writes the BOS
mkdir -p "$TMP/chat" && cp "$TMP/llama256"/* "$TMP/chat/" && cat >"$TMP/chat/tokenizer_config.json" <<'JSON'
{"bos_token": {"content": "<|begin_of_text|>"}, "eos_token": "<|end_of_text|>",
 "chat_template": "{{ bos_token }}{% for message in messages %}{{ message['role'] + ':\n' + message['content'] | trim + eos_token + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ 'assistant:\n' }}{% endif %}"}
JSON
gen --model "$TMP/chat" --template chat --system "Answer briefly." --prompt " Quote John 11:35. " --max-new-tokens 3 \
  --temperature 0 || fail "chat: exit $?"
printf '<|begin_of_text|>system:\nAnswer briefly.<|end_of_text|>\nuser:\nQuote John 11:35.<|end_of_text|>\nassistant:\n' \
  >"$TMP/chat-prompt"
cmp -s -n "$(wc -c <"$TMP/chat-prompt")" "$TMP/chat-prompt" "$TMP/out" ||
  fail "--template chat: stdout does not start with the chat template's text"
"$BIN" tokenize --model "$TMP/chat" --text "$TMP/chat-prompt" --no-bos --no-eos --out "$TMP/ids.bin" \
  >/dev/null 2>&1 || fail "tokenize the chat prompt: exit $?"
n=$(($(wc -c <"$TMP/ids.bin") / 2))
grep -q "^generate: $n prompt tokens, 3 new" "$TMP/err" ||
  fail "--template chat: not the $n tokens of the template's text (its specials split out, no BOS added)"
PASSED=$((PASSED + 1))

# the other families; GPT-2's 24 positions end the generation; an empty prompt starts from BOS
gen --model "$TMP/qwen2" --prompt "$PROMPT" --max-new-tokens 5 --top-p 0.9 --temperature 0.8 || fail "qwen2: exit $?"
grep -q "5 new (stopped: max-new-tokens)" "$TMP/err" || fail "qwen2: not 5 new tokens"
gen --model "$TMP/gpt2" --prompt "$PROMPT" --max-new-tokens 100 || fail "gpt2: exit $?"
grep -q "7 prompt tokens, 18 new (stopped: context full)" "$TMP/err" || fail "gpt2: 24 positions give 18 new tokens"
gen --model "$TMP/gpt2" --prompt "" --max-new-tokens 3 || fail "empty prompt: exit $?"
grep -q "1 prompt tokens, 3 new" "$TMP/err" || fail "empty prompt: BOS alone"

# bad input: exit 2 and the message names the option or the file
bad() {  # bad NAME TEXT -- ARGS
  local name=$1 text=$2 rc=0
  shift 3
  timeout 300 "$BIN" generate "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
  [ $rc -eq 2 ] || fail "$name: exit $rc, expected 2"
  grep -qF -- "$text" "$TMP/err" || fail "$name: stderr does not say '$text'"
  echo "generate_cli_test: $name: exit 2: $(head -n 1 "$TMP/err")"
  PASSED=$((PASSED + 1))
}
model "$TMP/bad-config" '{"model_type": "bert", "vocab_size": 4096}'
small=${LLAMA/\"vocab_size\": 4096/\"vocab_size\": 100}
model "$TMP/small-vocab" "${small/\"bos_token_id\": 4094, \"eos_token_id\": 4095/\"bos_token_id\": 1, \"eos_token_id\": 2}"
mkdir -p "$TMP/no-tok" && printf '%s\n' "$LLAMA" >"$TMP/no-tok/config.json"
long=$(printf 'and %.0s' $(seq 80))
bad "no directory" "--model $TMP/nowhere" -- --model "$TMP/nowhere" --prompt x
# no weights without --init random: the directory, what it holds and the names accepted
bad "no weights" "$TMP/llama: no weights file the reader recognises (found: config.json, tokenizer.json; accepted: \
model.safetensors" -- --model "$TMP/llama" --prompt x
ln -s "$TMP/blobs/nothing" "$TMP/llama/model.safetensors"
bad "dangling symlink" "$TMP/llama/model.safetensors: a dangling symlink" -- --model "$TMP/llama" --prompt x
rm "$TMP/llama/model.safetensors"
bad "--init other" "--init" -- --model "$TMP/llama" --prompt x --init zeros
bad "--input without a template" "--input" -- --model "$TMP/llama" --prompt x --input y --init random
bad "--template chat without a chat template" "$TMP/llama/tokenizer_config.json: chat_template: absent" -- \
  --model "$TMP/llama" --prompt x --template chat --init random
bad "--template other" "--template" -- --model "$TMP/llama" --prompt x --template vicuna --init random
bad "--system without chat" "--system: only with --template chat" -- --model "$TMP/chat" --prompt x --system y \
  --init random
bad "--no-bos with chat" "--no-bos: not with --template chat" -- --model "$TMP/chat" --prompt x --template chat \
  --no-bos --init random
mkdir -p "$TMP/chat-raise" && cp "$TMP/chat"/{config.json,tokenizer.json} "$TMP/chat-raise/" &&
  printf '%s\n' '{"chat_template": "{% if messages[0].role != \"system\" %}{{ raise_exception(\"a system message first\") }}{% endif %}"}' \
    >"$TMP/chat-raise/tokenizer_config.json"
bad "the chat template's raise_exception" "$TMP/chat-raise/tokenizer_config.json: chat_template" -- \
  --model "$TMP/chat-raise" --prompt x --template chat --init random
grep -qF "a system message first" "$TMP/err" || fail "raise_exception: the template's message is not shown"
printf '%s\n' '{"chat_template": "{% if false %}x{% endif %}"}' >"$TMP/chat-raise/tokenizer_config.json"
bad "a chat template without text" "$TMP/chat-raise/tokenizer_config.json: chat_template: renders no text" -- \
  --model "$TMP/chat-raise" --prompt x --template chat --init random
mkdir -p "$TMP/empty"
bad "no config.json" "$TMP/empty/config.json" -- --model "$TMP/empty" --prompt x
bad "bad model_type" "model_type" -- --model "$TMP/bad-config" --prompt x
bad "no tokenizer" "tokenizer" -- --model "$TMP/no-tok" --prompt x
bad "ids beyond vocab_size" "vocab_size 100" -- --model "$TMP/small-vocab" --prompt "$PROMPT"
bad "top-p 1.5" "--top-p" -- --model "$TMP/llama" --prompt x --top-p 1.5
bad "top-p 0" "--top-p" -- --model "$TMP/llama" --prompt x --top-p 0
bad "temperature -1" "--temperature" -- --model "$TMP/llama" --prompt x --temperature -1
bad "temperature nan" "--temperature" -- --model "$TMP/llama" --prompt x --temperature nan
bad "max-new-tokens 0" "--max-new-tokens" -- --model "$TMP/llama" --prompt x --max-new-tokens 0
bad "max-new-tokens abc" "--max-new-tokens" -- --model "$TMP/llama" --prompt x --max-new-tokens abc
bad "seed -1" "--seed" -- --model "$TMP/llama" --prompt x --seed -1
bad "threads 0" "--threads" -- --model "$TMP/llama" --prompt x --threads 0
bad "prompt too long" "max_position_embeddings" -- --model "$TMP/llama" --prompt "$long"
bad "empty prompt, no BOS" "--prompt" -- --model "$TMP/llama" --prompt "" --no-bos
bad "not UTF-8" "--prompt" -- --model "$TMP/llama" --prompt $'\xff\xfe'
bad "no --model" "--model" -- --prompt x
bad "unknown option" "--frobnicate" -- --model "$TMP/llama" --prompt x --frobnicate

# issue 46: numbers past their type (CLI11 alone saturates them), the default BOS, memory, threads
# that cannot start, non-finite logits, ids the tokenizer lacks
bad "seed 2^64" "--seed" -- --model "$TMP/llama" --prompt x --seed 18446744073709551616
bad "init-seed 2^64" "--init-seed" -- --model "$TMP/llama" --prompt x --init-seed 18446744073709551616
bad "max-new-tokens 2^64" "--max-new-tokens" -- --model "$TMP/llama" --prompt x --max-new-tokens 18446744073709551616
bad "max-new-tokens 2^30 + 1" "--max-new-tokens" -- --model "$TMP/llama" --prompt x --max-new-tokens 1073741825
bad "threads 2^64" "--threads" -- --model "$TMP/llama" --prompt x --threads 18446744073709551616
# GPT-2 without bos_token_id: GPT2Config's 50256 is no id of a 4096-id model
model "$TMP/gpt2-nobos" '{"model_type": "gpt2", "vocab_size": 4096, "n_embd": 16, "n_layer": 1, "n_head": 2,
  "n_positions": 24, "eos_token_id": 4095}'
bad "GPT-2's default BOS" "gpt2-nobos/config.json: bos_token_id: absent, and the gpt2 default 50256 is not below vocab_size 4096" \
  -- --model "$TMP/gpt2-nobos" --prompt x
model "$TMP/v1" '{"model_type": "llama", "vocab_size": 1, "hidden_size": 16, "intermediate_size": 16,
  "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 8, "eos_token_id": 0}'
bad "vocab_size 1, Llama's default BOS 1" "v1/config.json: bos_token_id: absent" -- --model "$TMP/v1" --prompt ""
gen --model "$TMP/gpt2-nobos" --prompt "$PROMPT" --no-bos --max-new-tokens 3 || fail "gpt2 without BOS, --no-bos: exit $?"
PASSED=$((PASSED + 1))
# memory: 2^24 ids x 4096 wide, untied (512 GiB of weights); a cache of 2^24 positions (66 GiB)
model "$TMP/huge-vocab" '{"model_type": "llama", "vocab_size": 16777216, "hidden_size": 4096, "intermediate_size": 16,
  "num_hidden_layers": 1, "num_attention_heads": 32, "max_position_embeddings": 64}'
bad "512 GiB of weights" "vocab_size, hidden_size" -- --model "$TMP/huge-vocab" --prompt x --init random
grep -qF "MemAvailable" "$TMP/err" || fail "the memory message does not say what is available"
model "$TMP/huge-cache" '{"model_type": "llama", "vocab_size": 4096, "hidden_size": 256, "intermediate_size": 16,
  "num_hidden_layers": 2, "num_attention_heads": 8, "max_position_embeddings": 16777216}'
bad "a 66 GiB cache" "max_position_embeddings" -- --model "$TMP/huge-cache" --prompt x --max-new-tokens 1073741824 \
  --init random
grep -qF -- "--max-new-tokens 1073741824" "$TMP/err" || fail "the cache message does not name --max-new-tokens"
# helper threads the process may not start (4 GiB of address space, 8 MiB stacks): exit 2, not
# std::terminate on joinable threads. Not under AddressSanitizer (tools/zf sanitize), whose shadow
# memory alone needs terabytes of address space.
if ldd "$BIN" 2>/dev/null | grep -q libasan; then
  echo "generate_cli_test: threads that cannot start: not checked (an AddressSanitizer build cannot run in 4 GiB of address space)"
else
  rc=0
  (ulimit -s 8192 && ulimit -v 4194304 && exec "$BIN" generate --model "$TMP/llama" --prompt x --max-new-tokens 2 \
    --threads 1024 --init random) >"$TMP/out" 2>"$TMP/err" || rc=$?
  [ $rc -eq 2 ] || fail "--threads 1024 in 4 GiB: exit $rc, expected 2"
  grep -qF -- "--threads 1024: could not start helper thread" "$TMP/err" || fail "--threads 1024: the message"
  [ ! -s "$TMP/out" ] || fail "--threads 1024: output before the error"
  echo "generate_cli_test: threads that cannot start: exit 2: $(head -n 1 "$TMP/err")"
  PASSED=$((PASSED + 1))
fi
# weights of about 1e30 (initializer_range): the logits overflow; exit 2 naming the weights, and
# nothing printed (the prompt goes out with the first token)
model "$TMP/overflow" "${LLAMA/\"rope_theta\": 10000.0/\"rope_theta\": 10000.0, \"initializer_range\": 1e30}"
bad "non-finite logits" "overflow: weights: the logit of token" -- --model "$TMP/overflow" --prompt "$PROMPT" \
  --init random
grep -qF "the largest |weight|" "$TMP/err" || fail "non-finite logits: the largest weight is not named"
[ ! -s "$TMP/out" ] || fail "non-finite logits: output before the error"
# a tokenizer.json whose vocabulary has the ids 0, 10, 20, ..., 40930 (and the added 4094, 4095):
# nine ids in ten below its 40931 are no token, and no candidate, so the text decodes; a BOS among
# them is refused
mkdir -p "$TMP/holes"
python3 - "$SRC/graphs/tokenizers/kjv-bpe/tokenizer.json" "$TMP/holes/tokenizer.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["model"]["vocab"] = {t: 10 * i for t, i in j["model"]["vocab"].items()}
json.dump(j, open(sys.argv[2], "w"))
PY
printf '%s\n' '{"model_type": "qwen2", "vocab_size": 40931, "hidden_size": 16, "intermediate_size": 16,
  "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 64,
  "tie_word_embeddings": true, "bos_token_id": 4094, "eos_token_id": 4095}' >"$TMP/holes/config.json"
gen --model "$TMP/holes" --prompt "$PROMPT" --max-new-tokens 20 --seed 5 || fail "ids the tokenizer lacks were drawn: exit $?"
grep -q "20 new (stopped: max-new-tokens)\|(stopped: EOS)" "$TMP/err" || fail "holes: not 20 new tokens or EOS"
PASSED=$((PASSED + 1))
sed -i 's/"bos_token_id": 4094/"bos_token_id": 5/' "$TMP/holes/config.json"
bad "a BOS the tokenizer lacks" "holes/config.json: bos_token_id: 5 is not an id of" -- --model "$TMP/holes" --prompt x
echo "generate_cli_test: all $PASSED checks passed"
