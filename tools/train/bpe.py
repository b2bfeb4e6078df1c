#!/usr/bin/python3
"""Byte-level BPE in the style of GPT-2: training, vocab.json/merges.txt I/O, and encoding.

    /usr/bin/python3 tools/train/bpe.py train --corpus WORK/corpus/train.txt --vocab-size 4096 --out DIR

Pre-tokenization is GPT-2's regex
    's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+
Python's `re` has no \\p{L}; we build explicit character classes from unicodedata categories
(L* = letter, N* = number) for the characters that occur in the text, so the split is exact.
Ids: 0..255 are the 256 byte tokens in GPT-2's bytes_to_unicode order (so '!' is 0 as in GPT-2),
then one id per merge in merge order, and <|endoftext|> is the last id.
Merge selection: the most frequent adjacent pair over the word-frequency table; ties are broken
by the smallest (left, right) pair of token strings, so training is deterministic.
"""
import argparse
import collections
import json
import os
import re
import sys
import time
import unicodedata

EOT = "<|endoftext|>"


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return bs, [chr(c) for c in cs]


_BS, _CS = bytes_to_unicode()
BYTE_ENCODER = {b: c for b, c in zip(_BS, _CS)}
BYTE_DECODER = {c: b for b, c in zip(_BS, _CS)}


class PreTokenizer:
    """GPT-2 pre-tokenization with exact \\p{L} / \\p{N} classes, built per character set."""

    def __init__(self):
        self.letters = set()
        self.numbers = set()
        self.known = set()
        self.rx = None

    def _update(self, text):
        new = set(text) - self.known
        if not new and self.rx is not None:
            return
        for c in new:
            cat = unicodedata.category(c)
            if cat.startswith("L"):
                self.letters.add(c)
            elif cat.startswith("N"):
                self.numbers.add(c)
        self.known |= new

        def cls(chars):
            # escape each character (sorted for determinism); ranges are not needed
            return "".join(re.escape(c) if c not in "-]\\^" else "\\" + c for c in sorted(chars))
        L = cls(self.letters) or "\\x00"
        N = cls(self.numbers) or "\\x00"
        pat = (r"'s|'t|'re|'ve|'m|'ll|'d| ?[" + L + r"]+| ?[" + N + r"]+| ?[^\s" + L + N +
               r"]+|\s+(?!\S)|\s+")
        self.rx = re.compile(pat)

    def split(self, text):
        self._update(text)
        return self.rx.findall(text)


def to_byte_string(piece):
    return "".join(BYTE_ENCODER[b] for b in piece.encode("utf-8"))


def train(text_docs, vocab_size, log=print):
    pt = PreTokenizer()
    counts = collections.Counter()
    for doc in text_docs:
        counts.update(pt.split(doc))
    log("pre-tokens: %d unique, %d total" % (len(counts), sum(counts.values())))
    words = []   # list of [symbols list, count]
    for w, c in counts.items():
        words.append([list(to_byte_string(w)), c])
    pair_counts = collections.defaultdict(int)
    where = collections.defaultdict(set)  # pair -> word indices
    for i, (syms, c) in enumerate(words):
        for a, b in zip(syms, syms[1:]):
            pair_counts[(a, b)] += c
            where[(a, b)].add(i)
    n_merges = vocab_size - 256 - 1
    merges = []
    t0 = time.time()
    for m in range(n_merges):
        if not pair_counts:
            break
        best_count = max(pair_counts.values())
        best = min(p for p, c in pair_counts.items() if c == best_count)
        merges.append(best)
        a, b = best
        ab = a + b
        for i in list(where[best]):
            syms, c = words[i]
            # remove old pair counts of this word
            for p in zip(syms, syms[1:]):
                pair_counts[p] -= c
                if pair_counts[p] == 0:
                    del pair_counts[p]
            j = 0
            new = []
            while j < len(syms):
                if j + 1 < len(syms) and syms[j] == a and syms[j + 1] == b:
                    new.append(ab)
                    j += 2
                else:
                    new.append(syms[j])
                    j += 1
            words[i][0] = new
            for p in zip(new, new[1:]):
                pair_counts[p] += c
                where[p].add(i)
        del where[best]
        pair_counts.pop(best, None)
        if (m + 1) % 500 == 0:
            log("merge %d/%d %r count=%d (%.0fs)" % (m + 1, n_merges, ab, best_count, time.time() - t0))
    return merges


def write(out_dir, merges):
    vocab = {}
    for i, c in enumerate(_CS):
        vocab[c] = i
    for a, b in merges:
        vocab[a + b] = len(vocab)
    vocab[EOT] = len(vocab)
    # ensure_ascii=True escapes every non-ASCII character as \uXXXX, like GPT-2's file
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="ascii") as f:
        json.dump(vocab, f, ensure_ascii=True, separators=(",", ":"))
    with open(os.path.join(out_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(a + " " + b + "\n")
    return vocab


class Tokenizer:
    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "vocab.json"), encoding="utf-8") as f:
            self.vocab = json.load(f)
        self.inv = {v: k for k, v in self.vocab.items()}
        self.ranks = {}
        with open(os.path.join(model_dir, "merges.txt"), encoding="utf-8") as f:
            lines = f.read().split("\n")
        for line in lines[1:]:
            if line:
                a, b = line.split(" ")
                self.ranks[(a, b)] = len(self.ranks)
        self.eot = self.vocab[EOT]
        self.pt = PreTokenizer()
        self.cache = {}

    def _bpe(self, word):
        syms = list(word)
        while len(syms) > 1:
            best, rank = None, None
            for p in zip(syms, syms[1:]):
                r = self.ranks.get(p)
                if r is not None and (rank is None or r < rank):
                    best, rank = p, r
            if best is None:
                break
            a, b = best
            new, j = [], 0
            while j < len(syms):
                if j + 1 < len(syms) and syms[j] == a and syms[j + 1] == b:
                    new.append(a + b)
                    j += 2
                else:
                    new.append(syms[j])
                    j += 1
            syms = new
        return [self.vocab[s] for s in syms]

    def encode(self, text):
        """Plain text -> ids. The literal <|endoftext|> is mapped to its id (as Hugging Face does)."""
        ids = []
        parts = text.split(EOT)
        for k, part in enumerate(parts):
            if k:
                ids.append(self.eot)
            for piece in self.pt.split(part):
                r = self.cache.get(piece)
                if r is None:
                    r = self._bpe(to_byte_string(piece))
                    if len(self.cache) < 500000:
                        self.cache[piece] = r
                ids.extend(r)
        return ids

    def decode(self, ids):
        s = "".join(self.inv[i] for i in ids)
        return bytes(BYTE_DECODER[c] for c in s if c in BYTE_DECODER).decode("utf-8", "replace") \
            if EOT not in s else s


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--corpus", required=True)
    t.add_argument("--vocab-size", type=int, default=4096)
    t.add_argument("--out", required=True)
    e = sub.add_parser("encode")
    e.add_argument("--model", required=True)
    e.add_argument("--text", required=True)
    args = ap.parse_args()
    if args.cmd == "train":
        docs = open(args.corpus, encoding="utf-8").read().split("\n" + EOT + "\n")
        merges = train(docs, args.vocab_size)
        os.makedirs(args.out, exist_ok=True)
        vocab = write(args.out, merges)
        print("wrote vocab of %d tokens to %s" % (len(vocab), args.out))
    else:
        tok = Tokenizer(args.model)
        ids = tok.encode(args.text)
        print(json.dumps({"ids": ids, "tokens": [tok.inv[i] for i in ids]}))


if __name__ == "__main__":
    sys.exit(main())
