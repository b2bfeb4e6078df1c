#!/usr/bin/python3
"""Information-flow routes as Meta's LM Transparency Tool (LM-TT) computes them, in float64: the
reference for core/analysis/info_routes.{h,cpp} (issue 26 item 3b).

Written from facebookresearch/llm-transparency-tool, not from HeadScope's C++:
  llm_transparency_tool/routes/contributions.py   get_contributions, get_contributions_with_one_off_part,
                                                  get_attention_contributions, get_mlp_contributions,
                                                  apply_threshold_and_renormalize
  llm_transparency_tool/routes/graph.py           GraphBuilder, build_full_graph, build_paths_to_predictions
  llm_transparency_tool/models/tlens_model.py     decomposed_attn, load_hooked_transformer
  llm_transparency_tool/server/app.py             the defaults: threshold 0.04, "Renormalize after
                                                  threshold" on, so the full graph is built with the
                                                  renormalizing threshold and the paths with 0

The model's forward pass is hsref.py's (float64, TransformerLens cache keys). What this file adds:

- decomposed_attn[q, k, h] = pattern[h, q, k] * (v[k, h] - b_V[h]) @ W_O[h]  [q, k, h, d_model].
  LM-TT adds b_V to hook_v, but TransformerLens's from_pretrained folds the value bias into b_O
  (fold_value_biases, on by default; LM-TT turns off only fold_ln and the centring), so b_V is zero
  there and hook_v has none: the parts carry no value bias, and neither b_O nor the folded bias is
  a part. With a post-attention norm (Gemma) each part goes through the norm with its scale frozen
  at the run's value (HeadScope's decision; LM-TT runs no Gemma 2 through TransformerLens's
  resid_mid).
- get_contributions: c = max(||whole||_1 - ||part - whole + 1e-6||_1, 1e-5) (torch's
  pairwise_distance adds its eps 1e-6 to the difference), divided by the sum over the parts.
  For attention the parts are every (key_pos, head) of the prompt, later keys included (their
  vectors are zero, so they get the floor), plus resid_pre; the whole is resid_mid. For the MLP
  the parts are mlp_out and resid_mid; the whole is resid_post.
- apply_threshold_and_renormalize: parts <= threshold set to 0, the rest divided by their sum for
  each representation (for the MLP as its docstring says, not as its literal sum over all
  positions does: see routes() below).
- The graph (GraphBuilder): nodes X0_t, A{l}_t, M{l}_t, I{l}_t; attention edges summed over heads,
  the residual edge I{l-1}_q -> A{l}_q added onto the self-attention edge (a DiGraph has one edge
  per pair); A -> M and M -> I both carry the MLP's share, A -> I the residual's.
  With parallel attention and MLP (NeoX) the MLP reads resid_pre, so M's input edge comes from
  I{l-1}_q (X0_q) instead of A{l}_q (HeadScope's decision; LM-TT has no parallel model).
- The routes (build_paths_to_predictions): the edges with weight > 0 reachable backwards from
  I{L-1}_{last} (networkx.edge_dfs on the reversed graph visits every reachable edge).
"""

from __future__ import annotations

import os
import sys
from typing import Dict, List, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hsref  # noqa: E402

EPS = 1e-5           # contributions.get_contributions
PAIRWISE_EPS = 1e-6  # torch.nn.functional.pairwise_distance's default eps


def torch():
    return hsref._torch()


# ------------------------------------------------------------------ contributions.py


def get_contributions(parts, whole):
    """parts [p..., v..., d], whole [v..., d] -> [p..., v...], summing to 1 over p (L1 distance)."""
    t = torch()
    k = parts.dim() - whole.dim()
    distance = t.nn.functional.pairwise_distance(parts, whole.expand(parts.shape), p=1)
    whole_norm = t.norm(whole, p=1, dim=-1)
    distance = (whole_norm - distance).clip(min=EPS)
    return distance / distance.sum(dim=tuple(range(k)), keepdim=True)


def get_contributions_with_one_off_part(parts, one_off, whole):
    t = torch()
    k = parts.dim() - whole.dim()
    flat = t.cat([parts.flatten(start_dim=0, end_dim=k - 1), one_off.unsqueeze(0)])
    c = get_contributions(flat, whole)
    return c[:-1].unflatten(0, parts.shape[0:k]), c[-1]


def apply_threshold_and_renormalize(threshold, c_blocks, c_residual):
    resid_dims, block_dims = c_residual.dim(), c_blocks.dim()
    c_blocks = c_blocks * (c_blocks > threshold)
    c_residual = c_residual * (c_residual > threshold)
    denom = c_residual + c_blocks.sum(dim=tuple(range(resid_dims, block_dims)))
    return c_blocks / denom.reshape(denom.shape + (1,) * (block_dims - resid_dims)), c_residual / denom


# ------------------------------------------------------------------ the model's pieces


def _w(model, name):
    return torch().from_numpy(np.asarray(model.weights[name], dtype=np.float64))


def attention_weights(model, l):
    """W_O [head, d_head, d_model], b_V per query head [head, d_head], post-norm weight [d_model] or None."""
    t = torch()
    c = model.config
    if isinstance(model, hsref.LlamaModel):
        H, KV, dh, D = c.n_head, c.n_kv, c.d_head, c.d_model
        p = f"layers.{l}."
        W_O = _w(model, p + "self_attn.o_proj.weight").T.reshape(H, dh, D)
        b_V = _w(model, p + "self_attn.v_proj.bias").reshape(KV, dh) if c.qkv_bias else t.zeros(KV, dh, dtype=t.float64)
        b_V = b_V[t.arange(H) // (H // KV)]  # query head h reads key/value head h // (H / KV)
        post = None
        if c.post_norms:
            post = _w(model, p + "post_attention_layernorm.weight")
            if c.norm_plus_one:
                post = 1.0 + post
        return W_O, b_V, post
    H, dh, D = c.n_head, c.d_head, c.d_model
    if isinstance(model, hsref.NeoXModel):
        p = f"layers.{l}."
        W_O = _w(model, p + "attention.dense.weight").T.reshape(H, dh, D)
        bias = _w(model, p + "attention.query_key_value.bias")
        b_V = bias.view(H, 3 * dh)[:, 2 * dh:] if c.qkv_split == "per_head" else bias[2 * D:].reshape(H, dh)
        return W_O, b_V, None
    p = f"h.{l}."
    W_O = _w(model, p + "attn.c_proj.weight").reshape(H, dh, D)
    b_V = _w(model, p + "attn.c_attn.bias")[2 * D:].reshape(H, dh)
    return W_O, b_V, None


def decomposed_attn(model, cache, l):
    """[query_pos, key_pos, head, d_model]: what head h moves from key k into query q's stream."""
    t = torch()
    W_O, b_V, post = attention_weights(model, l)
    H = W_O.shape[0]
    v = cache[f"blocks.{l}.attn.hook_v"]                         # [pos, kv_head, d_head]
    v = v.repeat_interleave(H // v.shape[1], dim=1) - b_V         # [pos, head, d_head], value bias folded out
    pattern = cache[f"blocks.{l}.attn.hook_pattern"]              # [head, query_pos, key_pos]
    z = t.einsum("khd,hqk->qkhd", v, pattern)
    parts = t.einsum("qkhd,hdm->qkhm", z, W_O)
    if post is not None:
        scale = cache[f"blocks.{l}.ln1_post.hook_scale"].reshape(-1)  # [pos]
        parts = parts * (post / scale[:, None])[:, None, None, :]
    return parts


def is_parallel(model):
    return isinstance(model, hsref.NeoXModel) and model.config.parallel


# ------------------------------------------------------------------ graph.py


def node_index(kind: str, layer: int, pos: int, n: int) -> int:
    """The node order shared with core/analysis/info_routes.h: X0_0..X0_{n-1}, then per layer A, M, I."""
    if kind == "X":
        return pos
    return n + layer * 3 * n + {"A": 0, "M": 1, "I": 2}[kind] * n + pos


def node_name(i: int, n: int) -> str:
    if i < n:
        return f"X0_{i}"
    layer, rest = divmod(i - n, 3 * n)
    kind, pos = divmod(rest, n)
    return f"{'AMI'[kind]}{layer}_{pos}"


class Routes:
    pass


def routes(model, tokens: List[int], threshold: float = 0.04, position: int = -1) -> Routes:
    t = torch()
    cache = hsref.forward_any(model, tokens)
    n = len(tokens)
    L = model.config.n_layer
    position = position % n
    r = Routes()
    r.tokens, r.threshold, r.position, r.n_layers = list(tokens), threshold, position, L
    attn_raw, attn_resid_raw, mlp_raw, mlp_resid_raw = [], [], [], []
    attn_kept, attn_resid_kept, mlp_kept, mlp_resid_kept = [], [], [], []
    sum_check = 0.0
    edges: Dict[Tuple[int, int], float] = {}

    def add_edge(u, v, w):  # GraphBuilder._add_edge: weights of a repeated pair add up
        edges[(u, v)] = edges.get((u, v), 0.0) + w

    for l in range(L):
        resid_pre = cache[f"blocks.{l}.hook_resid_pre"]
        resid_mid = cache[f"blocks.{l}.hook_resid_mid"]
        resid_post = cache[f"blocks.{l}.hook_resid_post"]
        parts = decomposed_attn(model, cache, l)                   # [q, k, h, d]
        # get_attention_contributions: parts (key_pos, head), batch pos, whole resid_mid
        c_attn, c_resid = get_contributions_with_one_off_part(parts.permute(1, 2, 0, 3), resid_pre, resid_mid)
        c_attn = c_attn.permute(2, 0, 1)                           # [q, k, h]
        sum_check = max(sum_check, float((c_attn.sum(dim=(1, 2)) + c_resid - 1).abs().max()))
        c_mlp_both = get_contributions(t.stack((cache[f"blocks.{l}.hook_mlp_out"], resid_mid)), resid_post)
        c_mlp, c_mlp_resid = c_mlp_both[0], c_mlp_both[1]
        attn_raw.append(c_attn), attn_resid_raw.append(c_resid), mlp_raw.append(c_mlp), mlp_resid_raw.append(c_mlp_resid)
        ka, kr = apply_threshold_and_renormalize(threshold, c_attn, c_resid)
        # LM-TT passes the MLP's shares as [batch, pos], the shape of the residual's, so its
        # c_blocks.sum(dim=()) reduces over every position (torch: an empty dim tuple sums all)
        # and a token's MLP share is divided by the residual's share plus the MLP shares of all
        # tokens. Its docstring means one sum per representation, as for attention: a trailing
        # block dimension of 1 gives that. The kept edges, and so the routes, are the same.
        km, kmr = apply_threshold_and_renormalize(threshold, c_mlp.unsqueeze(-1), c_mlp_resid)
        km = km[:, 0]
        literal_km, _ = apply_threshold_and_renormalize(threshold, c_mlp, c_mlp_resid)
        assert bool(((literal_km > 0) == (km > 0)).all())
        attn_kept.append(ka), attn_resid_kept.append(kr), mlp_kept.append(km), mlp_resid_kept.append(kmr)
        src = (lambda q: node_index("X", 0, q, n)) if l == 0 else (lambda q: node_index("I", l - 1, q, n))
        for q in range(n):
            for k in range(n):
                add_edge(src(k), node_index("A", l, q, n), float(ka[q, k].sum()))
            add_edge(src(q), node_index("A", l, q, n), float(kr[q]))
            mlp_from = src(q) if is_parallel(model) else node_index("A", l, q, n)
            add_edge(mlp_from, node_index("M", l, q, n), float(km[q]))
            add_edge(node_index("M", l, q, n), node_index("I", l, q, n), float(km[q]))
            add_edge(node_index("A", l, q, n), node_index("I", l, q, n), float(kmr[q]))

    stack = lambda xs: t.stack(xs).numpy()
    r.attn_raw, r.attn_resid_raw = stack(attn_raw), stack(attn_resid_raw)      # [layer, q, k, head], [layer, q]
    r.mlp_raw, r.mlp_resid_raw = stack(mlp_raw), stack(mlp_resid_raw)          # [layer, q]
    r.attn_kept, r.attn_resid_kept = stack(attn_kept), stack(attn_resid_kept)
    r.mlp_kept, r.mlp_resid_kept = stack(mlp_kept), stack(mlp_resid_kept)
    r.sum_check = sum_check
    # The full graph: LM-TT adds every pair, zero weights too; the routes keep weight > 0.
    r.graph = {e: w for e, w in edges.items() if w > 0}
    # build_paths_to_predictions: edge_dfs over the reversed graph from the output node; it visits
    # every edge reachable from it, so the route is the reachable edges.
    into: Dict[int, List[int]] = {}
    for (u, v) in r.graph:
        into.setdefault(v, []).append(u)
    start = node_index("I", L - 1, position, n)
    seen, todo, route = {start}, [start], set()
    while todo:
        v = todo.pop()
        for u in into.get(v, ()):
            route.add((u, v))
            if u not in seen:
                seen.add(u)
                todo.append(u)
    r.route = sorted(route)
    # How far the raw shares sit from the threshold: the C++'s float32 run must land on the same side.
    raw = np.concatenate([r.attn_raw.reshape(-1), r.attn_resid_raw.reshape(-1), r.mlp_raw.reshape(-1),
                          r.mlp_resid_raw.reshape(-1)])
    r.margin = float(np.abs(raw - threshold).min())
    return r
