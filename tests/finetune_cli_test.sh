#!/usr/bin/env bash
# A Hugging Face user's path without a spec file (docs/finetune.md): zenflow-run finetune on Alpaca
# records (tools/kjv-instructions.py on the KJV) with a DeepSpeed config (bf16, stage 2, CPU offload, a
# zenflow block), chat records (TRL's and ShareGPT's) in a chat template, eval without training (the fine-tuned model's loss below the base model's), export
# from a checkpoint (the same model.safetensors as the run's own --save-hf), --print-spec, and the bad
# inputs exiting 2 naming the option or the file (no weights, a data file of another kind, eval with a
# training option, export into an occupied directory). Prints "FAIL: ..." and exits 1.
# Usage: finetune_cli_test.sh ZENFLOW_RUN SOURCE_DIR KJV_TXT
set -u
[ $# -eq 3 ] || { echo "usage: $0 ZENFLOW_RUN SOURCE_DIR KJV_TXT" >&2; exit 1; }
BIN=$1 SRC=$2 KJV=$3
[ -f "$KJV" ] || { echo "SKIP: $KJV missing (bash tools/zf setup writes it)"; exit 77; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/zf_finetune_XXXXXX") || { echo "FAIL: mktemp"; exit 1; }
trap 'rm -rf "$TMP"' EXIT
export STARPU_HOME=$TMP/starpu-home STARPU_SILENT=1 STARPU_WORKERS_NOBIND=1
mkdir -p "$STARPU_HOME"
fail() { echo "FAIL: $*"; for f in "$TMP"/out "$TMP"/err; do echo "---- $f"; cat "$f" 2>/dev/null; done; exit 1; }
zf() { "$BIN" "$@" >"$TMP/out" 2>"$TMP/err"; }
json() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."): d=d[k]
print(d)' "$1" "$2"; }

# Alpaca records (156: every 400th verse, two records each) and a Llama with the KJV tokenizer
python3 "$SRC/tools/kjv-instructions.py" --every 400 "$KJV" "$TMP/alpaca.jsonl" >/dev/null ||
  fail "kjv-instructions.py"
mkdir -p "$TMP/cfg" && cp "$SRC/graphs/tokenizers/kjv-bpe/tokenizer.json" "$TMP/cfg/" &&
  printf '%s\n' '{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 4096,
  "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "max_position_embeddings": 256, "rope_theta": 10000.0, "bos_token_id": 4094,
  "eos_token_id": 4095}' >"$TMP/cfg/config.json"
cat >"$TMP/ds.json" <<'EOF'
{
  "train_batch_size": 8,
  "gradient_accumulation_steps": 1,
  "gradient_clipping": 1.0,
  "bf16": {"enabled": true},
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
  "zero_optimization": {
    "stage": 2,
    "offload_optimizer": {"device": "cpu", "pin_memory": true},
    "zenflow": {"topk_ratio": 0.1, "update_interval": 4, "full_warm_up_rounds": 0, "overlap_step": true}
  },
  "zero_allow_untested_optimizer": true
}
EOF

zf finetune --help || fail "finetune --help: exit $?"
for w in --model --data --eval-data --deepspeed --epochs --steps --context --save-hf --print-spec --metrics \
         --checkpoint-dir --resume --gradient-checkpointing "Alpaca"; do
  grep -qF -- "$w" "$TMP/out" || fail "finetune --help does not mention $w"
done
zf eval --help || fail "eval --help: exit $?"
zf export --help || fail "export --help: exit $?"

# the effective spec: from the model, the data and the DeepSpeed config
zf finetune --model "$TMP/cfg" --data "$TMP/alpaca.jsonl" --deepspeed "$TMP/ds.json" --print-spec ||
  fail "--print-spec: exit $?"
python3 - "$TMP/out" "$TMP" <<'EOF' || fail "--print-spec: not the expected spec"
import json, sys
s = json.load(open(sys.argv[1])); t = sys.argv[2]
assert s["model"]["type"] == "hf" and s["model"]["path"] == t + "/cfg" and s["model"]["context"] == 256, s["model"]
assert s["data"]["dataset"] == "instructions" and s["data"]["path"] == t + "/alpaca.jsonl", s["data"]
assert s["strategy"] == "zenflow" and s["precision"] == "bf16" and s["zero_optimization"]["stage"] == 2, s
assert s["train"]["batch_size"] == 8 and s["optimizer"]["lr"] == 3e-3, s
# only the fields that apply to a Hugging Face model on instruction data
for block, key in [("model", "hidden"), ("model", "n_layer"), ("model", "vocab"), ("model", "pool"),
                   ("data", "dir"), ("data", "labels"), ("data", "split"), ("data", "train_limit")]:
    assert key not in s[block], (block, key, s[block])
EOF
echo "finetune_cli_test: --print-spec: zenflow, bf16, stage 2, instructions"

# a model directory without weights: exit 2 naming it, no silent random init
zf finetune --model "$TMP/cfg" --data "$TMP/alpaca.jsonl" -q
[ $? -eq 2 ] || fail "no weights: expected exit 2"
grep -qF "$TMP/cfg: no weights file the reader recognises (found: config.json, tokenizer.json;" "$TMP/err" ||
  fail "no weights: the message does not name the directory and its files"
grep -qF -- "--init random" "$TMP/err" || fail "no weights: the message does not say --init random"

# a base model: a random init trained 1 step, saved; its eval loss
zf finetune --model "$TMP/cfg" --data "$TMP/alpaca.jsonl" --init random --steps 1 --save-hf "$TMP/base" -q ||
  fail "base model: exit $?"
zf eval --model "$TMP/base" --data "$TMP/alpaca.jsonl" --metrics "$TMP/e0.json" || fail "eval base: exit $?"
grep -q "zenflow-run eval: loss" "$TMP/out" || fail "eval prints no loss"
L0=$(json "$TMP/e0.json" eval.loss)

# fine-tuning with the DeepSpeed config, a checkpoint, --save-hf; eval of the result
zf finetune --model "$TMP/base" --data "$TMP/alpaca.jsonl" --deepspeed "$TMP/ds.json" --epochs 2 \
  --set train.eval_every=10 --checkpoint-dir "$TMP/ck" --save-hf "$TMP/ft" --metrics "$TMP/ft.json" ||
  fail "finetune: exit $?"
grep -q "strategy zenflow" "$TMP/out" || fail "finetune: the header does not say strategy zenflow"
# the evaluations during the run, the summary's rows for the outputs
grep -q "^eval at step 10/34: loss" "$TMP/out" || fail "finetune: no 'eval at step 10/34' line (train.eval_every)"
grep -q "Hugging Face model *$TMP/ft$" "$TMP/out" || fail "finetune: the summary does not say where --save-hf wrote"
[ "$(json "$TMP/ft.json" steps)" = 34 ] || fail "finetune: not 2 epochs of 17 steps"
zf eval --model "$TMP/ft" --data "$TMP/alpaca.jsonl" --metrics "$TMP/e1.json" || fail "eval fine-tuned: exit $?"
L1=$(json "$TMP/e1.json" eval.loss)
python3 -c "import sys; sys.exit(0 if float('$L1') < float('$L0') - 0.5 else 1)" ||
  fail "eval loss after fine-tuning $L1 not below the base's $L0 - 0.5"
echo "finetune_cli_test: eval loss base $L0, fine-tuned $L1"

# export from the checkpoint: the bytes --save-hf wrote at the end of the run
zf export --resume "$TMP/ck" --save-hf "$TMP/exp" || fail "export: exit $?"
cmp "$TMP/exp/model.safetensors" "$TMP/ft/model.safetensors" || fail "export's tensors differ from --save-hf's"
cmp "$TMP/exp/config.json" "$TMP/cfg/config.json" || fail "export changed config.json"
cmp "$TMP/exp/tokenizer.json" "$TMP/cfg/tokenizer.json" || fail "export did not copy tokenizer.json"
echo "finetune_cli_test: export: the same model.safetensors as --save-hf"

# --gradient-checkpointing (Hugging Face's; train.activation_checkpointing "every_layer"): the same
# weights, bitwise, with fewer activation buffers
zf finetune --model "$TMP/base" --data "$TMP/alpaca.jsonl" --steps 3 --save-hf "$TMP/g0" --metrics "$TMP/g0.json" -q ||
  fail "finetune 3 steps: exit $?"
zf finetune --model "$TMP/base" --data "$TMP/alpaca.jsonl" --steps 3 --gradient-checkpointing --save-hf "$TMP/g1" \
  --metrics "$TMP/g1.json" -q || fail "finetune --gradient-checkpointing: exit $?"
cmp "$TMP/g0/model.safetensors" "$TMP/g1/model.safetensors" || fail "--gradient-checkpointing changed the weights"
A0=$(json "$TMP/g0.json" device_state_bytes.activations) A1=$(json "$TMP/g1.json" device_state_bytes.activations)
[ "$A1" -lt "$A0" ] || fail "--gradient-checkpointing: activation buffers $A1 bytes, without $A0"
echo "finetune_cli_test: --gradient-checkpointing: the same weights, activation buffers $A1 of $A0 bytes"

# chat records (TRL's messages, ShareGPT's conversations) in the model's chat template: detected, trained
# (the loss on the assistant's turns), evaluated
python3 - "$TMP/alpaca.jsonl" "$TMP/chat.jsonl" "$TMP/sharegpt.json" <<'EOF' || fail "chat records"
import json, sys
trl, share = [], []
for line in open(sys.argv[1]):
    r = json.loads(line)
    user = r["instruction"] + ("\n\n" + r["input"] if r["input"] else "")
    trl.append({"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": r["output"]}]})
    share.append({"conversations": [{"from": "human", "value": user}, {"from": "gpt", "value": r["output"]}]})
open(sys.argv[2], "w").write("".join(json.dumps(m) + "\n" for m in trl))
json.dump(share, open(sys.argv[3], "w"))
EOF
mkdir -p "$TMP/chat" && cp "$TMP/base"/* "$TMP/chat/" && cat >"$TMP/chat/tokenizer_config.json" <<'EOF'
{"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|end_of_text|>"},
 "chat_template": "{{ bos_token }}{% for message in messages %}{{ message['role'] + ':\n' + message['content'] | trim + eos_token + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ 'assistant:\n' }}{% endif %}"}
EOF
zf finetune --model "$TMP/chat" --data "$TMP/chat.jsonl" --print-spec || fail "chat --print-spec: exit $?"
grep -q '"dataset": "chat"' "$TMP/out" || fail "chat records: --print-spec does not say data.dataset chat"
zf finetune --model "$TMP/chat" --data "$TMP/chat.jsonl" --steps 4 --metrics "$TMP/chat.json" ||
  fail "finetune on chat records: exit $?"
grep -q "141 chat records from $TMP/chat.jsonl" "$TMP/out" || fail "chat: the header does not describe the records"
zf finetune --model "$TMP/chat" --data "$TMP/sharegpt.json" --set data.pack=true --steps 2 ||
  fail "finetune on ShareGPT records, packed: exit $?"
grep -q "packed rows of chat records from $TMP/sharegpt.json" "$TMP/out" || fail "ShareGPT: not packed chat rows"
zf eval --model "$TMP/chat" --data "$TMP/chat.jsonl" --metrics "$TMP/ce.json" || fail "eval on chat records: exit $?"
echo "finetune_cli_test: chat records: trained, packed, evaluated (eval loss $(json "$TMP/ce.json" eval.loss))"

# bad input: exit 2 and the option or the file named
bad() {  # NAME TEXT -- ARGS
  local name=$1 text=$2 rc=0
  shift 3
  "$BIN" "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
  [ $rc -eq 2 ] || fail "$name: exit $rc, expected 2"
  grep -qF -- "$text" "$TMP/err" || fail "$name: stderr does not say '$text'"
  echo "finetune_cli_test: $name: exit 2: $(head -n 1 "$TMP/err")"
}
printf '%s\n' '{"messages": [{"role": "user", "content": "hi"}]}' >"$TMP/chat-other.jsonl"
printf '%s\n' '{"prompt": "a", "completion": "b"}' >"$TMP/other.jsonl"
head -c 64 /dev/zero >"$TMP/t.bin"
bad "no --data" "--data" -- finetune --model "$TMP/base"
bad "missing data file" "--data $TMP/nowhere.jsonl: no such file" -- \
  finetune --model "$TMP/base" --data "$TMP/nowhere.jsonl"
bad "records of another shape" "--data $TMP/other.jsonl: JSON records without an \"instruction\", \"messages\" or \"conversations\" field" -- \
  finetune --model "$TMP/base" --data "$TMP/other.jsonl"
bad "chat records without a reply" "$TMP/chat-other.jsonl: record 0 (line 1): messages: no assistant message" -- \
  finetune --model "$TMP/chat" --data "$TMP/chat-other.jsonl" --eval-data "$TMP/chat.jsonl"
bad "chat records and a model without a chat template" "$TMP/base/tokenizer_config.json: chat_template: absent" -- \
  finetune --model "$TMP/base" --data "$TMP/chat.jsonl"
bad "token file without --eval-data" "--eval-data" -- finetune --model "$TMP/base" --data "$TMP/t.bin"
bad "eval with --save-hf" "--save-hf: not with eval" -- eval --model "$TMP/base" --data "$TMP/alpaca.jsonl" \
  --save-hf "$TMP/x"
bad "eval without data" "--model DIR and --data FILE" -- eval --model "$TMP/base"
bad "export into an occupied directory" "--save-hf $TMP/ft: exists and is not an empty directory" -- \
  export --resume "$TMP/ck" --save-hf "$TMP/ft"
bad "export of no checkpoint" "$TMP/base" -- export --resume "$TMP/base" --save-hf "$TMP/y"
bad "--context beyond the model" "--context (model.context): 512 exceeds" -- finetune --model "$TMP/base" \
  --data "$TMP/alpaca.jsonl" --context 512
# messages that blame the right thing: config.json's vocab_size, not a data record; config.json's sizes, not
# the GPT's model.n_layer
mkdir -p "$TMP/v2048" && cp "$TMP/cfg/tokenizer.json" "$TMP/v2048/" &&
  sed -e 's/"vocab_size": 4096/"vocab_size": 2048/' -e 's/"bos_token_id": 4094/"bos_token_id": 1/' \
    -e 's/"eos_token_id": 4095/"eos_token_id": 2/' "$TMP/cfg/config.json" >"$TMP/v2048/config.json"
bad "config.json's vocab_size below the tokenizer's ids" "$TMP/v2048/config.json: vocab_size: 2048, but the tokenizer" \
  -- finetune --model "$TMP/v2048" --data "$TMP/alpaca.jsonl" --init random
mkdir -p "$TMP/huge" && cp "$TMP/cfg/tokenizer.json" "$TMP/huge/" &&
  sed -e 's/"hidden_size": 32/"hidden_size": 16384/' -e 's/"intermediate_size": 64/"intermediate_size": 65536/' \
    -e 's/"num_hidden_layers": 2/"num_hidden_layers": 120/' "$TMP/cfg/config.json" >"$TMP/huge/config.json"
bad "an hf model too big for the memory" "$TMP/huge/config.json: hidden_size, intermediate_size, num_hidden_layers" \
  -- finetune --model "$TMP/huge" --data "$TMP/alpaca.jsonl" --init random
echo "PASS"
