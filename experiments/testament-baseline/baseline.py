#!/usr/bin/env python3
"""Word-level baselines for the testament task (docs/gpt.md), outside the engine, for scale.

The same verses, labels and held-out splits as the engine's gpt-classifier (models/nets/gpt_classifier.cpp):
  book  : held out Ruth, Ecclesiastes, Lamentations, Joel, Jonah, Philippians, James, 1 John
  verse : held out every verse whose index (0-based, canonical order) % 10 == 9
Inputs: a verse's text (no reference) cut to its first N bytes, as the classifier sees it with context N.
Models on lower-cased words and word bigrams (binary features):
  nb : multinomial naive Bayes, Laplace smoothing
  lr : logistic regression, full-batch Adam (lr 0.05, 200 iterations, L2 1e-5), PyTorch on the CPU
and, on whole verses only, the generative head's idea with counts:
  ngram : one character 6-gram language model per class (interpolated, Witten-Bell weights, over
          the verse's bytes and its closing newline), Bayes' rule with the training class prior
Prints one JSON line per (split, N, model) and writes a Markdown table to --out.
"""
import argparse, json, math, os, re, sys, tempfile

import torch

HELD_OUT_BOOKS = {"Ruth", "Eccl", "Lam", "Joel", "Jonah", "Phi", "Jas", "1Jn"}
FIRST_NEW = "Mat"


def load(path):
    refs, texts = [], []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            ref, sep, text = line.rstrip("\n").partition(" ")
            m = re.match(r"^(.+?)(\d+):(\d+)$", ref)
            if not sep or not m:
                sys.exit(f"{path}:{n}: expected '<Book><chapter>:<verse> <text>', got {line[:40]!r}")
            refs.append(m.group(1))
            texts.append(text)
    books = list(dict.fromkeys(refs))
    if len(books) != 66 or FIRST_NEW not in books:
        sys.exit(f"{path}: expected the 66 books of bible(1)'s output, found {len(books)}")
    first_new = books.index(FIRST_NEW)
    labels = [int(books.index(b) >= first_new) for b in refs]
    return refs, texts, labels


def features(text, cut):
    w = re.findall(r"[a-z]+", text.encode()[:cut].decode("utf-8", "ignore").lower())
    return set(w) | {a + " " + b for a, b in zip(w, w[1:])}


def naive_bayes(Xtr, ytr, Xte):
    counts = [dict(), dict()]
    total = [0, 0]
    for f, y in zip(Xtr, ytr):
        for t in f:
            counts[y][t] = counts[y].get(t, 0) + 1
        total[y] += len(f)
    vocab = set(counts[0]) | set(counts[1])
    prior = [math.log(ytr.count(c) / len(ytr)) for c in (0, 1)]
    out = []
    for f in Xte:
        s = [prior[c] + sum(math.log((counts[c].get(t, 0) + 1) / (total[c] + len(vocab))) for t in f if t in vocab)
             for c in (0, 1)]
        out.append(int(s[1] > s[0]))
    return out


def ngram_generative(tr_texts, ytr, te_texts, n=6):
    """Class-conditional character n-gram models: argmax_c log prior(c) + log p(verse + '\\n' | c)."""
    from collections import Counter, defaultdict
    models = []
    for c in (0, 1):
        cnt = [defaultdict(Counter) for _ in range(n + 1)]
        for t, y in zip(tr_texts, ytr):
            if y != c:
                continue
            s = "\x02" * n + t + "\n"
            for p in range(n, len(s)):
                for k in range(n + 1):
                    cnt[k][s[p - k:p]][s[p]] += 1
        tot = [{h: sum(v.values()) for h, v in cnt[k].items()} for k in range(n + 1)]
        models.append((cnt, tot))
    prior = [math.log(ytr.count(c) / len(ytr)) for c in (0, 1)]

    def logp(model, t):
        cnt, tot = model
        s, lp = "\x02" * n + t + "\n", 0.0
        for p in range(n, len(s)):
            pr = 1.0 / 256
            for k in range(n + 1):  # lower orders first; stop at the first unseen context
                h = s[p - k:p]
                c = cnt[k].get(h)
                if not c:
                    break
                T, u = tot[k][h], len(c)
                lam = T / (T + u)
                pr = lam * c[s[p]] / T + (1 - lam) * pr
            lp += math.log(pr)
        return lp

    return [int(prior[1] + logp(models[1], t) > prior[0] + logp(models[0], t)) for t in te_texts]


def logistic(Xtr, ytr, Xte):
    vocab = {}
    for f in Xtr:
        for t in f:
            vocab.setdefault(t, len(vocab))

    def sparse(X):
        rows, cols = [], []
        for r, f in enumerate(X):
            for t in f:
                if t in vocab:
                    rows.append(r)
                    cols.append(vocab[t])
        return torch.sparse_coo_tensor([rows, cols], torch.ones(len(rows)), (len(X), len(vocab))).coalesce()

    torch.manual_seed(0)
    A, B = sparse(Xtr), sparse(Xte)
    y = torch.tensor(ytr)
    W = torch.zeros(len(vocab), 2, requires_grad=True)
    b = torch.zeros(2, requires_grad=True)
    opt = torch.optim.Adam([W, b], lr=0.05)
    for _ in range(200):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(torch.sparse.mm(A, W) + b, y) + 1e-5 * (W * W).sum()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return (torch.sparse.mm(B, W) + b).argmax(1).tolist()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--text", default="/var/tmp/zenflow/kjv.txt", help="bible(1)'s output, one verse a line")
    ap.add_argument("--out", required=True, help="Markdown table to write (atomically)")
    ap.add_argument("--cuts", default="64,128,256,100000", help="input lengths in bytes (100000: whole verse)")
    a = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    refs, texts, labels = load(a.text)
    rows = []
    for split in ("book", "verse"):
        held = [(r in HELD_OUT_BOOKS) if split == "book" else (i % 10 == 9) for i, r in enumerate(refs)]
        tr = [i for i in range(len(texts)) if not held[i]]
        te = [i for i in range(len(texts)) if held[i]]
        ytr, yte = [labels[i] for i in tr], [labels[i] for i in te]
        majority = int(sum(ytr) * 2 > len(ytr))
        base = sum(y == majority for y in yte) / len(yte)
        for cut in [int(c) for c in a.cuts.split(",")]:
            Xtr = [features(texts[i], cut) for i in tr]
            Xte = [features(texts[i], cut) for i in te]
            for name, fn in (("nb", naive_bayes), ("lr", logistic)):
                pred = fn(Xtr, ytr, Xte)
                acc = sum(p == y for p, y in zip(pred, yte)) / len(yte)
                row = {"split": split, "bytes": cut, "model": name, "held_out": len(te), "accuracy": acc,
                       "majority": base}
                print(json.dumps(row), flush=True)
                rows.append(row)
            if cut >= 100000:
                pred = ngram_generative([texts[i] for i in tr], ytr, [texts[i] for i in te])
                acc = sum(p == y for p, y in zip(pred, yte)) / len(yte)
                row = {"split": split, "bytes": cut, "model": "ngram", "held_out": len(te), "accuracy": acc,
                       "majority": base}
                print(json.dumps(row), flush=True)
                rows.append(row)
    lines = ["| split | input | held out | majority class | naive Bayes | logistic regression | char 6-gram LM per class |",
             "|---|---|---|---|---|---|---|"]
    for split in ("book", "verse"):
        for cut in dict.fromkeys(r["bytes"] for r in rows):
            r = {x["model"]: x for x in rows if x["split"] == split and x["bytes"] == cut}
            inp = "whole verse" if cut >= 100000 else f"first {cut} bytes"
            ng = f"{100 * r['ngram']['accuracy']:.2f} %" if "ngram" in r else "-"
            lines.append(f"| {split} | {inp} | {r['nb']['held_out']} | {100 * r['nb']['majority']:.2f} % | "
                         f"{100 * r['nb']['accuracy']:.2f} % | {100 * r['lr']['accuracy']:.2f} % | {ng} |")
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(a.out)))
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
