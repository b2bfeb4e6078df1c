#!/usr/bin/python3
"""Writes tests/fixtures/qk: QK traces from qkref.py (the float64 reference), one folder per case
with case.json (the model, transcoders, tokens and the edge, paths relative to the source tree)
and qk.npz (numpy.savez, int32 / float64):
  query_keys, key_keys  int32 [n, 4]: kind (qkref.KINDS), layer, index, pos of each component
  query_u, key_v        [n, d_head]: each component's share of rot_q (rot_k); term = scale u . v
  scale, score, score_before_softcap, total, resid_error, tokens

    /usr/bin/python3 tools/reference/make_qk_fixtures.py [--out tests/fixtures/qk]

Cases: the built-in model with its transcoders (its induction head: the head of layers 1-3 that
attends most from the second " dog" to " ran") and with neurons (layer 1's previous-token head);
llama_gqa (rotary, GQA) with the graph fixture's plain and skip transcoders, and with neurons;
gemma2_window (post-norms, attention soft-cap, a sliding layer), qwen3_qknorm (q/k norms) and
gemma3_local_global (q/k norms with 1 + w, a sliding layer's local rotary) with neurons.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import hsref  # noqa: E402
import make_graph_fixtures  # noqa: E402  (its GPT-2 tokenizer and prompts)
import qkref  # noqa: E402

TINY = "resources/models/headscope-tiny"
TINY_TCS = [f"{TINY}/saes/transcoder_{i}" for i in range(4)]
LLAMA_TCS = ["tests/fixtures/graph/llama/transcoders/layer_0", "tests/fixtures/graph/llama/transcoders/layer_1"]
SMALL = [290, 5, 9, 13, 17, 21, 25, 29]


def _argmax_head(model_dir, tokens, layers, query, key):
    model = hsref.load_any(os.path.join(ROOT, model_dir))
    cache = hsref.forward_any(model, tokens)
    best = max(((float(cache[f"blocks.{l}.attn.hook_pattern"][h, query, key]), l, h)
                for l in layers for h in range(model.config.n_head)))
    return best[1], best[2]


def cases():
    tok = make_graph_fixtures.Tokenizer(os.path.join(ROOT, TINY))
    tiny_tokens = [4095] + tok.encode(make_graph_fixtures.PROMPT_BUILTIN)   # BOS the dog ran . the dog
    induction = _argmax_head(TINY, tiny_tokens, (1, 2, 3), 6, 3)
    previous = _argmax_head(TINY, tiny_tokens, (1,), 6, 5)
    llama_tokens = make_graph_fixtures.PROMPT_LLAMA
    return [
        dict(name="builtin_features", model=TINY, transcoders=TINY_TCS, tokens=tiny_tokens,
             layer=induction[0], head=induction[1], query=6, key=3),
        dict(name="builtin_neurons", model=TINY, transcoders=[], tokens=tiny_tokens,
             layer=previous[0], head=previous[1], query=6, key=5),
        dict(name="llama_features", model="tests/fixtures/models/llama_gqa", transcoders=LLAMA_TCS,
             tokens=llama_tokens, layer=1, head=3, query=5, key=2),
        dict(name="llama_neurons", model="tests/fixtures/models/llama_gqa", transcoders=[],
             tokens=llama_tokens, layer=1, head=2, query=5, key=4),
        dict(name="gemma2_neurons", model="tests/fixtures/models/gemma2_window", transcoders=[],
             tokens=SMALL, layer=2, head=3, query=7, key=5),
        dict(name="qwen3_neurons", model="tests/fixtures/models/qwen3_qknorm", transcoders=[],
             tokens=SMALL, layer=1, head=1, query=7, key=3),
        dict(name="gemma3_neurons", model="tests/fixtures/models/gemma3_local_global", transcoders=[],
             tokens=SMALL, layer=3, head=0, query=7, key=4),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/fixtures/qk"))
    a = ap.parse_args()
    for c in cases():
        folder = os.path.join(a.out, c["name"])
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        t = qkref.qk_trace(os.path.join(ROOT, c["model"]), c["tokens"], c["layer"], c["head"], c["query"], c["key"],
                           [os.path.join(ROOT, d) for d in c["transcoders"]] or None)
        # The reference's own identities: its terms sum to its forward's score (before a cap), and
        # each side's components to its hook_resid_pre.
        assert abs(t.total - t.score_before_softcap) <= 1e-10 * max(1.0, np.abs(t.terms).sum()), c["name"]
        assert t.resid_error <= 1e-10, c["name"]
        np.savez(os.path.join(folder, "qk.npz"), query_keys=t.query_keys, key_keys=t.key_keys,
                 query_u=t.query_u, key_v=t.key_v, scale=np.array([t.scale]), score=np.array([t.score]),
                 score_before_softcap=np.array([t.score_before_softcap]), total=np.array([t.total]),
                 resid_error=np.array([t.resid_error]), tokens=t.tokens)
        with open(os.path.join(folder, "case.json"), "w", encoding="utf-8") as f:
            json.dump(c, f, indent=1)
            f.write("\n")
        print(f"{c['name']}: L{c['layer']}H{c['head']} q {c['query']} k {c['key']}: score {t.score:.6g}, before the "
              f"cap {t.score_before_softcap:.12g}, terms sum {t.total:.12g}; {len(t.query_keys)} x {len(t.key_keys)} "
              f"components, resid error {t.resid_error:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
