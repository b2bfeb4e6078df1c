#!/usr/bin/python3
"""Writes tests/fixtures/routes: information-flow routes from routesref.py (the float64 LM
Transparency Tool reference), one folder per model with routes.npz (numpy.savez, int32 and
float64 only).

    /usr/bin/python3 tools/reference/make_routes_fixtures.py [--out tests/fixtures/routes]

  builtin/  resources/models/headscope-tiny (GPT-2 family, value biases), a repeated sentence
  llama/    tests/fixtures/models/llama_gqa (Llama, grouped-query attention)
  neox/     tests/fixtures/models/neox_parallel (GPT-NeoX, parallel attention and MLP, value biases)
  gemma2/   tests/fixtures/models/gemma2_window (Gemma 2: post-attention norm, sliding window of 4)

routes.npz holds, for threshold 0.04 and the last position:
  tokens int32 [pos]; threshold, margin (min |raw share - threshold|) float64 [1]
  attn_raw [layer, query_pos, key_pos, head], attn_resid_raw [layer, query_pos],
  mlp_raw, mlp_resid_raw [layer, pos]: get_contributions' shares, before the threshold
  attn_kept, attn_resid_kept, mlp_kept, mlp_resid_kept: after apply_threshold_and_renormalize
  graph_edges int32 [E, 2] (from, to node indices, routesref.node_index order), graph_weights [E]:
      LM-TT's graph (heads summed, the residual added onto the self-attention edge), weight > 0
  route_edges int32 [R, 2]: build_paths_to_predictions' edges from I{L-1}_{last}
Fixed inputs, no randomness: rerunning rewrites the same files.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import hsref  # noqa: E402
import routesref  # noqa: E402
from make_graph_fixtures import Tokenizer  # noqa: E402

THRESHOLD = 0.04
# The C++ runs in float32: a raw share this close to the threshold could land on the other side.
MIN_MARGIN = 5e-5
PROMPT_BUILTIN = " when mary and john went to the store, john gave a drink to"


def check_decomposition(model, tokens):
    """The parts plus the biases (b_V folded into b_O, through the frozen post-norm) are hook_attn_out."""
    t = routesref.torch()
    cache = hsref.forward_any(model, tokens)
    worst = 0.0
    for l in range(model.config.n_layer):
        W_O, b_V, post = routesref.attention_weights(model, l)
        parts = routesref.decomposed_attn(model, cache, l)
        bias = t.einsum("hd,hdm->m", b_V, W_O)
        if isinstance(model, hsref.LlamaModel):
            if model.config.o_bias:
                bias = bias + routesref._w(model, f"layers.{l}.self_attn.o_proj.bias")
        elif isinstance(model, hsref.NeoXModel):
            bias = bias + routesref._w(model, f"layers.{l}.attention.dense.bias")
        else:
            bias = bias + routesref._w(model, f"h.{l}.attn.c_proj.bias")
        bias = bias.expand(len(tokens), -1)
        if post is not None:
            bias = bias * post / cache[f"blocks.{l}.ln1_post.hook_scale"].reshape(-1, 1)
        err = (parts.sum(dim=(1, 2)) + bias - cache[f"blocks.{l}.hook_attn_out"]).abs().max()
        worst = max(worst, float(err))
    assert worst < 1e-10, f"the decomposed attention misses hook_attn_out by {worst}"
    return worst


def write(folder, model_dir, tokens):
    model = hsref.load_any(model_dir)
    dec = check_decomposition(model, tokens)
    r = routesref.routes(model, tokens, THRESHOLD)
    assert r.sum_check < 1e-12, r.sum_check
    assert r.margin > MIN_MARGIN, f"{folder}: a raw share is {r.margin} from the threshold; pick another prompt"
    os.makedirs(folder, exist_ok=True)
    edges = sorted(r.graph)
    np.savez(os.path.join(folder, "routes.npz"),
             tokens=np.asarray(tokens, np.int32), threshold=np.asarray([THRESHOLD]), margin=np.asarray([r.margin]),
             attn_raw=r.attn_raw, attn_resid_raw=r.attn_resid_raw, mlp_raw=r.mlp_raw, mlp_resid_raw=r.mlp_resid_raw,
             attn_kept=r.attn_kept, attn_resid_kept=r.attn_resid_kept, mlp_kept=r.mlp_kept,
             mlp_resid_kept=r.mlp_resid_kept,
             graph_edges=np.asarray(edges, np.int32).reshape(-1, 2),
             graph_weights=np.asarray([r.graph[e] for e in edges], np.float64),
             route_edges=np.asarray(r.route, np.int32).reshape(-1, 2))
    n = len(tokens)
    print(f"{os.path.basename(folder)}: {n} tokens, {len(edges)} graph edges, {len(r.route)} route edges, "
          f"margin {r.margin:.2e}, decomposition error {dec:.1e}; route into the output: "
          f"{[routesref.node_name(u, n) for (u, v) in r.route if v == routesref.node_index('I', r.n_layers - 1, n - 1, n)]}")


def fixture_tokens(name):
    import json
    with open(os.path.join(ROOT, "tests/fixtures/models", name, "fixture.json"), encoding="utf-8") as f:
        return [int(x) for x in json.load(f)["tokens"]]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/fixtures/routes"))
    args = ap.parse_args()
    builtin = os.path.join(ROOT, "resources/models/headscope-tiny")
    write(os.path.join(args.out, "builtin"), builtin, [4095] + Tokenizer(builtin).encode(PROMPT_BUILTIN))
    # The models' own fixture prompts; Gemma 2's cut to 6 tokens (still past its window of 4), where
    # no raw share sits within MIN_MARGIN of the threshold.
    for folder, name, n in (("llama", "llama_gqa", 20), ("neox", "neox_parallel", 20), ("gemma2", "gemma2_window", 6)):
        write(os.path.join(args.out, folder), os.path.join(ROOT, "tests/fixtures/models", name), fixture_tokens(name)[:n])


if __name__ == "__main__":
    main()
