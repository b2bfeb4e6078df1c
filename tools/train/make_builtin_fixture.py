#!/usr/bin/python3
"""Reference logits of the built-in model on held-out text, for the C++ engine's test.

    /usr/bin/python3 tools/train/make_builtin_fixture.py --model resources/models/headscope-tiny \
        --out tests/fixtures/builtin

Writes OUT/logits.safetensors with
    tokens  F32 [P]        the exact integer ids (BOS first), P = 1 + len(tokenize(TEXT))
    logits  F32 [P, vocab] computed in float64 from the stored F16 weights, then rounded to F32
and OUT/fixture.json with the text, the ids, the shapes, the tolerance and the head scores
(head_scores.py) of the committed model.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import head_scores  # noqa: E402
from gpt2 import load_model_dir, save_safetensors  # noqa: E402

# Held-out (never trained on): H. G. Wells, The War of the Worlds, book 2 chapter 7.
# 60 tokens; with BOS, 61 positions.
TEXT = ('"Those who stop obey orders. Able-bodied, clean-minded women we want also--mothers and '
        'teachers. No lackadaisical ladies--no blasted rolling eyes. We can\'t have any weak or '
        'silly.')


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    model, cfg = load_model_dir(args.model, torch.float64)
    tok = bpe.Tokenizer(args.model)
    ids = [cfg.eos_token_id] + tok.encode(TEXT)
    logits = model(torch.tensor([ids]))[0].numpy().astype(np.float32)
    os.makedirs(args.out, exist_ok=True)
    save_safetensors(os.path.join(args.out, "logits.safetensors"),
                     {"tokens": np.array(ids, dtype=np.float32), "logits": logits},
                     {"format": "pt"})
    scores = head_scores.compute(args.model)
    top = [int(i) for i in np.argsort(-logits[-1])[:5]]
    info = {
        "description": "headscope-tiny (resources/models/headscope-tiny) on held-out text; "
                       "logits computed in float64 from the stored F16 weights",
        "model": "resources/models/headscope-tiny",
        "text": TEXT,
        "bos_prepended": True,
        "tokens": ids,
        "positions": len(ids),
        "vocab_size": cfg.vocab_size,
        "tolerance": {"logits_max_abs": 1e-4},
        "last_position_top5": [{"id": i, "token": tok.inv[i], "logit": float(logits[-1][i])}
                               for i in top],
        "head_scores": {k: scores[k] for k in ("previous_token", "duplicate_token", "induction",
                                               "best", "definitions", "prose_tokens")},
        "prose": head_scores.PROSE,
        "rep_first_ids": head_scores.repeated_random_tokens(cfg.vocab_size, cfg.eos_token_id)[0, 1:11].tolist(),
        "generator": "tools/train/make_builtin_fixture.py",
    }
    with open(os.path.join(args.out, "fixture.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    print("wrote %d positions x %d logits; max |logit| %.3f" % (
        len(ids), cfg.vocab_size, float(np.abs(logits).max())))


if __name__ == "__main__":
    main()
