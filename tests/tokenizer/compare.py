#!/usr/bin/python3
"""Compares the tokenizer test's results (tests/tokenizer_test.sh): REF/NAME.{ids,dec,decskip}
(Hugging Face's or sentencepiece's) against OURS/NAME.* (zf_tokenizer_tool). Prints one line per
text, the first difference with its context where they differ; exit 1 on any difference.
  /usr/bin/python3 compare.py LABEL REF_DIR OURS_DIR"""
import json
import os
import sys

label, ref, ours = sys.argv[1:4]
bad = equal = total_ids = total_bytes = total_pieces = 0
names = sorted(f[:-4] for f in os.listdir(ref) if f.endswith(".ids"))
if not names:
    sys.exit(f"compare: {label}: no results in {ref}")
for name in names:
    r = open(os.path.join(ref, name + ".ids")).read().split()
    path = os.path.join(ours, name + ".ids")
    if not os.path.exists(path):
        print(f"compare: {label}: {name}: FAIL: no result of ours ({path})")
        bad += 1
        continue
    o = open(path).read().split()
    if r != o:
        k = next((i for i in range(min(len(r), len(o))) if r[i] != o[i]), min(len(r), len(o)))
        print(f"compare: {label}: {name}: FAIL: ids differ at {k} of {len(r)} (reference) / {len(o)} (ours): "
              f"reference ...{' '.join(r[max(0, k - 3):k + 4])}..., ours ...{' '.join(o[max(0, k - 3):k + 4])}...")
        bad += 1
        continue
    decoded, ok = [], True
    for ext in (".dec", ".decskip"):
        a = open(os.path.join(ref, name + ext), "rb").read()
        b = open(os.path.join(ours, name + ext), "rb").read()
        if a != b:
            k = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
            print(f"compare: {label}: {name}: FAIL: decode{ext[4:] and ' (skip special)'} differs at byte {k}: "
                  f"reference {a[max(0, k - 20):k + 20]!r}, ours {b[max(0, k - 20):k + 20]!r}")
            bad += 1
            ok = False
        decoded.append(len(a))
    pieces_ref = os.path.join(ref, name + ".pieces")
    if os.path.exists(pieces_ref):  # the pre-tokenizer's pieces (tokenizer.json with a pre-tokenizer)
        a = json.load(open(pieces_ref, encoding="utf-8"))
        mine = os.path.join(ours, name + ".pieces")
        b = json.load(open(mine, encoding="utf-8")) if os.path.exists(mine) else None
        if a != b:
            k = next((i for i in range(min(len(a), len(b or []))) if a[i] != b[i]), min(len(a), len(b or [])))
            print(f"compare: {label}: {name}: FAIL: pre-tokenizer pieces differ at piece {k} of {len(a)}: "
                  f"reference {a[k:k + 3]!r}, ours {(b or [])[k:k + 3]!r}")
            bad += 1
            ok = False
        else:
            total_pieces += len(a)
    if ok:
        total_ids += len(r)
        total_bytes += decoded[0]
        equal += 1
if not bad:
    print(f"compare: {label}: {equal} texts, {total_ids} ids equal, decoded text equal ({total_bytes} bytes)"
          + (f", {total_pieces} pre-tokenizer pieces equal" if total_pieces else ""))
sys.exit(1 if bad else 0)
