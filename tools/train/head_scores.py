#!/usr/bin/python3
"""Head scores for every attention head (independent PyTorch implementation, float64).

    /usr/bin/python3 tools/train/head_scores.py --model resources/models/headscope-tiny [--json OUT]
    /usr/bin/python3 tools/train/head_scores.py --model DIR --text "a prompt" [--no-bos]

The model is loaded from the folder as stored (F16 weights converted exactly to float64), and the
forward pass runs in float64. Attention pattern A[q, k] = softmax over k <= q of the scaled scores.

Definitions (all means are plain arithmetic means; BOS = <|endoftext|> = vocab_size - 1):

* previous-token score (l, h): on PROSE below, tokenized with the model's tokenizer and with BOS
  prepended (T = 1 + 236 = 237 positions for headscope-tiny), the mean over query positions
  q = 2 .. T-1 of A[q, q-1]. Query 1 (whose previous token is BOS) and query 0 are left out.

* induction and duplicate-token scores (l, h): on B = 10 sequences, each BOS followed by n = 50
  random token ids, followed by the same 50 ids again (length 2n + 1 = 101).
  Random ids: one splitmix64 stream with seed 0 (state += 0x9E3779B97F4A7C15;
  z = state; z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
  out = z ^ (z >> 31); all mod 2^64), id = out % (vocab_size - 1) (so never BOS), drawn
  sequence after sequence, position after position (sequence 0's 50 ids first).
  Second-copy query positions q = n+1 .. 2n (the token at q equals the token at q - n).
    induction score  = mean over the B sequences and those n queries of A[q, q - n + 1]
                       (the token right after the previous occurrence),
    duplicate score  = mean over the same of A[q, q - n] (the previous occurrence itself).

On any prompt (`--text`, and `prompt_scores` for a pattern already computed), the same three scores
are read off one sequence of tokens t[0..T-1], the way TransformerLens's head detector builds
detection patterns, but averaged over the rows where the behaviour can show:

* previous-token: mean over q = 2 .. T-1 of A[q, q-1] (as above).
* duplicate-token: D[q, k] = 1 when k < q and t[k] == t[q] (k = 0 left out when it is a prepended
  BOS); mean over the rows q with any D[q, :] = 1 of sum_k A[q, k] D[q, k].
* induction: I[q, k] = D[q, k - 1] for 1 <= k < q (the position after an earlier occurrence, other
  than q itself); mean over the rows with any I[q, :] = 1 of sum_k A[q, k] I[q, k].
A score with no such row is None ("no score"), not 0. On BOS + R + R with the ids of R distinct the
rows are exactly the second copy's and these are the scores above for one sequence.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
from gpt2 import load_model_dir  # noqa: E402

# Held-out (never trained on): Jane Austen, Persuasion, chapter 21.
PROSE = (
    '"Mr Elliot," replied Mrs Smith, "at that period of his life, had one object in view: to make '
    'his fortune, and by a rather quicker process than the law. He was determined to make it by '
    'marriage. He was determined, at least, not to mar it by an imprudent marriage; and I know it '
    'was his belief (whether justly or not, of course I cannot decide), that your father and '
    'sister, in their civilities and invitations, were designing a match between the heir and the '
    'young lady, and it was impossible that such a match should have answered his ideas of wealth '
    'and independence. That was his motive for drawing back, I can assure you. He told me the '
    'whole story. He had no concealments with me. It was curious, that having just left you behind '
    'me in Bath, my first and principal acquaintance on marrying should be your cousin; and that, '
    'through him, I should be continually hearing of your father and sister. He described one Miss '
    'Elliot, and I thought very affectionately of the other."')

REP_SEQS = 10
REP_LEN = 50
REP_SEED = 0


def splitmix64(seed):
    M = (1 << 64) - 1
    state = seed & M
    while True:
        state = (state + 0x9E3779B97F4A7C15) & M
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
        yield z ^ (z >> 31)


def repeated_random_tokens(vocab_size, bos, n=REP_LEN, batch=REP_SEQS, seed=REP_SEED):
    g = splitmix64(seed)
    rows = []
    for _ in range(batch):
        r = [next(g) % (vocab_size - 1) for _ in range(n)]
        rows.append([bos] + r + r)
    return torch.tensor(rows, dtype=torch.long)


@torch.no_grad()
def compute(model_dir):
    model, cfg = load_model_dir(model_dir, torch.float64)
    tok = bpe.Tokenizer(model_dir)
    bos = cfg.eos_token_id
    L, H = cfg.n_layer, cfg.n_head

    prose_ids = [bos] + tok.encode(PROSE)
    x = torch.tensor([prose_ids])
    _, pats = model(x, want_patterns=True)
    T = x.shape[1]
    q = torch.arange(2, T)
    prev = [[pats[l][0, h, q, q - 1].mean().item() for h in range(H)] for l in range(L)]

    n = REP_LEN
    rep = repeated_random_tokens(cfg.vocab_size, bos)
    _, pats = model(rep, want_patterns=True)
    q = torch.arange(n + 1, 2 * n + 1)
    ind = [[pats[l][:, h, q, q - n + 1].mean().item() for h in range(H)] for l in range(L)]
    dup = [[pats[l][:, h, q, q - n].mean().item() for h in range(H)] for l in range(L)]

    def best(m):
        l, h = max(((l, h) for l in range(L) for h in range(H)), key=lambda lh: m[lh[0]][lh[1]])
        return {"layer": l, "head": h, "score": m[l][h]}

    return {
        "previous_token": prev, "induction": ind, "duplicate_token": dup,
        "best": {"previous_token": best(prev), "induction": best(ind),
                 "duplicate_token": best(dup)},
        "prose_tokens": prose_ids,
        "definitions": {
            "previous_token": "BOS + tokenize(PROSE); mean over q=2..T-1 of A[q,q-1]",
            "induction": "10 x (BOS + r[50] + r[50]), r from splitmix64(seed 0) % (vocab-1); "
                         "mean over q=51..100 of A[q,q-49]",
            "duplicate_token": "same sequences; mean over q=51..100 of A[q,q-50]",
        },
    }


def detection_masks(tokens, bos_prepended=True):
    """[T, T] float64 0/1 masks (query row, key column) of the previous-token, duplicate-token and
    induction detectors on `tokens`, written as TransformerLens's head detector writes them."""
    t = torch.tensor(list(tokens), dtype=torch.long)
    T = t.shape[0]
    lower = torch.ones(T, T, dtype=torch.float64).tril(-1)          # k < q
    prev = torch.zeros(T, T, dtype=torch.float64)
    for q in range(2, T):
        prev[q, q - 1] = 1.0
    dup = (t[:, None] == t[None, :]).to(torch.float64) * lower
    if bos_prepended and T > 0:
        dup[:, 0] = 0.0                                             # BOS is no occurrence
    ind = torch.zeros(T, T, dtype=torch.float64)
    ind[:, 1:] = dup[:, :-1]                                        # one position to the right
    ind = ind * lower                                               # k < q: not the query itself
    return {"previous_token": prev, "duplicate_token": dup, "induction": ind}


def prompt_scores(patterns, tokens, bos_prepended=True):
    """patterns: [layer, head, query_pos, key_pos] float64 attention. Returns, per detector,
    {"scores": [layer][head] of float or None, "query_positions": int}."""
    out = {}
    for name, mask in detection_masks(tokens, bos_prepended).items():
        rows = mask.sum(dim=1) > 0                                  # the rows the score averages
        per_row = (patterns * mask).sum(dim=-1)                     # [layer, head, query_pos]
        n = int(rows.sum().item())
        L, H = patterns.shape[0], patterns.shape[1]
        if n == 0:
            scores = [[None] * H for _ in range(L)]
        else:
            scores = per_row[:, :, rows].mean(dim=-1).tolist()
        out[name] = {"scores": scores, "query_positions": n}
    return out


@torch.no_grad()
def compute_prompt(model_dir, text, bos_prepended=True):
    """The scores on one prompt, tokenized with the model's tokenizer (BOS first unless told)."""
    model, cfg = load_model_dir(model_dir, torch.float64)
    tok = bpe.Tokenizer(model_dir)
    ids = ([cfg.eos_token_id] if bos_prepended else []) + tok.encode(text)
    _, pats = model(torch.tensor([ids]), want_patterns=True)
    patterns = torch.stack([p[0] for p in pats])                    # [layer, head, q, k]
    res = prompt_scores(patterns, ids, bos_prepended)
    res["tokens"] = ids
    return res


def table(res):
    L = len(res["induction"])
    H = len(res["induction"][0])
    lines = ["| head | previous-token | duplicate-token | induction |",
             "| --- | ---: | ---: | ---: |"]
    for l in range(L):
        for h in range(H):
            lines.append("| L%d H%d | %.3f | %.3f | %.3f |" % (
                l, h, res["previous_token"][l][h], res["duplicate_token"][l][h],
                res["induction"][l][h]))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--json")
    ap.add_argument("--text", help="score this prompt instead of the fixed sequences")
    ap.add_argument("--no-bos", action="store_true", help="with --text: do not prepend BOS")
    args = ap.parse_args()
    if args.text is not None:
        res = compute_prompt(args.model, args.text, not args.no_bos)
        print(json.dumps(res, indent=1))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
        return
    res = compute(args.model)
    print(table(res))
    print(json.dumps(res["best"], indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
