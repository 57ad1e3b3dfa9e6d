#!/usr/bin/env python3
# A small instruction data set made from the KJV (docs/hf.md, "Data"): Alpaca-style records for
# data.dataset "instructions", deterministic (no randomness: the same bible(1) output gives the same
# bytes). Every 100th verse (0-based index % 100 == 0, canonical order: 312 verses of 31102) gives
# two records:
#   {"instruction": "Quote Genesis 1:1.", "input": "", "output": "<the verse>"}
#   {"instruction": "Which book and chapter is this verse from?", "input": "<the verse>", "output": "Genesis 1"}
# in that order for the 1st, 3rd, ... verse chosen and the other way round for the 2nd, 4th, ...: the
# held-out records (every 10th, index % 10 == 9, docs/hf.md) are then of both kinds, not all of the second.
# Usage: python3 tools/kjv-instructions.py [--json] [--every N] [KJV_TXT [OUT]]
#   KJV_TXT: bible(1)'s output (bash tools/zf setup writes /var/tmp/zenflow/kjv.txt, the default)
#   OUT: default KJV_TXT's directory / kjv-instructions.jsonl (JSONL, one record a line), or
#        kjv-instructions.json with --json (one JSON array); written atomically
import json
import os
import re
import sys

# bible(1)'s abbreviations and the names models/data/text.cpp gives the 66 books, in canonical order.
BOOKS = [
    ("Ge", "Genesis"), ("Exo", "Exodus"), ("Lev", "Leviticus"), ("Num", "Numbers"), ("Deu", "Deuteronomy"),
    ("Josh", "Joshua"), ("Jdgs", "Judges"), ("Ruth", "Ruth"), ("1Sm", "1 Samuel"), ("2Sm", "2 Samuel"),
    ("1Ki", "1 Kings"), ("2Ki", "2 Kings"), ("1Chr", "1 Chronicles"), ("2Chr", "2 Chronicles"), ("Ezra", "Ezra"),
    ("Neh", "Nehemiah"), ("Est", "Esther"), ("Job", "Job"), ("Psa", "Psalms"), ("Prv", "Proverbs"),
    ("Eccl", "Ecclesiastes"), ("SSol", "Song of Solomon"), ("Isa", "Isaiah"), ("Jer", "Jeremiah"),
    ("Lam", "Lamentations"), ("Eze", "Ezekiel"), ("Dan", "Daniel"), ("Hos", "Hosea"), ("Joel", "Joel"),
    ("Amos", "Amos"), ("Obad", "Obadiah"), ("Jonah", "Jonah"), ("Mic", "Micah"), ("Nahum", "Nahum"),
    ("Hab", "Habakkuk"), ("Zep", "Zephaniah"), ("Hag", "Haggai"), ("Zec", "Zechariah"), ("Mal", "Malachi"),
    ("Mat", "Matthew"), ("Mark", "Mark"), ("Luke", "Luke"), ("John", "John"), ("Acts", "Acts"), ("Rom", "Romans"),
    ("1Cor", "1 Corinthians"), ("2Cor", "2 Corinthians"), ("Gal", "Galatians"), ("Eph", "Ephesians"),
    ("Phi", "Philippians"), ("Col", "Colossians"), ("1Th", "1 Thessalonians"), ("2Th", "2 Thessalonians"),
    ("1Tim", "1 Timothy"), ("2Tim", "2 Timothy"), ("Titus", "Titus"), ("Phmn", "Philemon"), ("Heb", "Hebrews"),
    ("Jas", "James"), ("1Pet", "1 Peter"), ("2Pet", "2 Peter"), ("1Jn", "1 John"), ("2Jn", "2 John"),
    ("3Jn", "3 John"), ("Jude", "Jude"), ("Rev", "Revelation"),
]
NAMES = dict(BOOKS)


def fail(msg):
    sys.stderr.write("kjv-instructions.py: " + msg + "\n")
    sys.exit(2)


def verses(path):
    with open(path, "rb") as f:
        data = f.read().decode("utf-8")
    for n, line in enumerate(data.split("\n"), 1):
        line = line.rstrip("\r")
        if not line:
            continue
        m = re.fullmatch(r"([1-3]?[A-Za-z]+)(\d+):(\d+) (.+)", line, re.S)
        if not m or m.group(1) not in NAMES:
            fail(f"{path}:{n}: expected bible(1) output (\"Ge1:1 In the beginning ...\")")
        yield NAMES[m.group(1)], int(m.group(2)), int(m.group(3)), m.group(4)


def records(path, every):
    out = []
    for i, (book, chapter, verse, text) in enumerate(verses(path)):
        if i % every:
            continue
        pair = [{"instruction": f"Quote {book} {chapter}:{verse}.", "input": "", "output": text},
                {"instruction": "Which book and chapter is this verse from?", "input": text,
                 "output": f"{book} {chapter}"}]
        out.extend(pair if (i // every) % 2 == 0 else pair[::-1])
    return out


def main(argv):
    as_json, every, args = False, 100, []
    it = iter(argv)
    for a in it:
        if a == "--json":
            as_json = True
        elif a == "--every":
            every = int(next(it, "0"))
            if every < 1:
                fail("--every N: expected a whole number >= 1")
        else:
            args.append(a)
    src = args[0] if args else "/var/tmp/zenflow/kjv.txt"
    out = args[1] if len(args) > 1 else os.path.join(
        os.path.dirname(src) or ".", "kjv-instructions.json" if as_json else "kjv-instructions.jsonl")
    recs = records(src, every)
    if as_json:
        text = json.dumps(recs, ensure_ascii=False, indent=1) + "\n"
    else:
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs)
    tmp = f"{out}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, out)
    print(f"kjv-instructions.py: {len(recs)} records from {src} -> {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
