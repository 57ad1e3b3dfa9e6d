#!/usr/bin/python3
"""Trains the tokenizer test's sentencepiece fixtures on the KJV text (run once by hand;
docs/tokenizers.md; the files are in the repository):
  fixtures/sp-kjv/tokenizer.model        a BPE sentencepiece model with Llama 2's training options
                                         (byte fallback, split digits, identity normalization), 2000 ids
  fixtures/llama2-kjv/tokenizer.json     that model as transformers' LlamaConverter writes a Llama 2
                                         tokenizer.json (legacy form): Prepend + Replace normalizers,
                                         BPE with byte fallback and fused <unk>, merges from the vocabulary
  /usr/bin/python3 tests/tokenizer/make_sp_fixtures.py KJV.txt
Debian's python3-sentencepiece."""
import json
import os
import sys

import sentencepiece as spm

here = os.path.dirname(os.path.abspath(__file__))
model_dir = os.path.join(here, "fixtures", "sp-kjv")
json_dir = os.path.join(here, "fixtures", "llama2-kjv")
os.makedirs(model_dir, exist_ok=True)
os.makedirs(json_dir, exist_ok=True)
prefix = os.path.join(model_dir, "tokenizer")
spm.SentencePieceTrainer.train(
    input=sys.argv[1], model_prefix=prefix, model_type="bpe", vocab_size=2000, byte_fallback=True,
    split_digits=True, allow_whitespace_only_pieces=True, remove_extra_whitespaces=False,
    normalization_rule_name="identity", add_dummy_prefix=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
    num_threads=1, minloglevel=2)
os.remove(prefix + ".vocab")
sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
# transformers' SentencePieceExtractor: every split of a piece into two pieces, in the order of
# the merged piece's id (its score), then the parts' ids
merges = []
for piece, pid in vocab.items():
    if sp.is_control(pid) or sp.is_byte(pid) or sp.is_unknown(pid):
        continue
    local = [(piece[:k], piece[k:]) for k in range(1, len(piece)) if piece[:k] in vocab and piece[k:] in vocab]
    local.sort(key=lambda p: (vocab[p[0]], vocab[p[1]]))
    merges += [(pid, a, b) for a, b in local]
merges.sort(key=lambda m: m[0])
special = lambda i, c: {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                        "normalized": False, "special": True}
tok = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                       {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": None,
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                       "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                       "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
              "vocab": vocab, "merges": [[a, b] for _, a, b in merges]},
}
with open(os.path.join(json_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
    json.dump(tok, f, ensure_ascii=False, indent=1)
    f.write("\n")
print(f"make_sp_fixtures: {prefix}.model ({sp.get_piece_size()} pieces), "
      f"{json_dir}/tokenizer.json ({len(vocab)} ids, {len(merges)} merges)")
