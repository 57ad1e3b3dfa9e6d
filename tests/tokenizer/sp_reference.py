#!/usr/bin/python3
"""The tokenizer test's sentencepiece reference (tests/tokenizer_test.sh): for each text file,
Debian's python3-sentencepiece's ids of MODEL (encode, no BOS/EOS) and its decode, written as
zf_tokenizer_tool writes them: OUT/NAME.ids, OUT/NAME.dec, OUT/NAME.decskip.
  /usr/bin/python3 sp_reference.py MODEL OUT TEXT_FILE..."""
import os
import sys

import sentencepiece as spm

model, out, texts = sys.argv[1], sys.argv[2], sys.argv[3:]
sp = spm.SentencePieceProcessor(model_file=model)
os.makedirs(out, exist_ok=True)
for path in texts:
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    ids = sp.encode(text)
    base = os.path.join(out, os.path.basename(path))
    with open(base + ".ids", "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    dec = sp.decode(ids)
    for ext in (".dec", ".decskip"):
        with open(base + ext, "w", encoding="utf-8", newline="") as f:
            f.write(dec)
    print(f"sp_reference: {os.path.basename(path)}: {len(ids)} ids", file=sys.stderr)
