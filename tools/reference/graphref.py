#!/usr/bin/python3
"""HeadScope's float64 reference for attribution graphs (issue 26), written from circuit-tracer's
Python, not from HeadScope's C++:
  decoderesearch/circuit-tracer (main, 2026-04)
    replacement_model/replacement_model_transformerlens.py  _configure_gradient_flow (the freezes),
        _configure_skip_connection, setup_attribution, ensure_tokenized (zero_positions)
    transcoder/single_layer_transcoder.py  compute_attribution_components, encode_sparse, decode_sparse
    attribution/attribute_transformerlens.py, context_transformerlens.py  (node order, injection points)
    utils/salient_logits.py compute_salient_logits; graph.py prune_graph and helpers
    utils/create_graph_files.py, frontend/graph_models.py  (the JSON)
See /work/notes/graph-spec.md for the details and the differences from the June 2025 release.

The local replacement model is written out as a function of one multiplier per source node
(every feature, error and token node), so that it is linear in them: attention patterns and
norm scales are constants taken from the real run (hsref's forward), each MLP's output is
W_skip x + b_dec + sum_f s_f a_f W_dec[f] + s_err e + (the unattributed part at zeroed positions).
At s = 1 it reproduces the real run; the adjacency is its Jacobian (target inputs by source
multipliers) from torch autograd; a target's constant is its input at s = 0.

    /usr/bin/python3 tools/reference/graphref.py --model DIR --transcoders DIR [DIR ...]
        --tokens 4095,12,34 [-o GRAPH.npz]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hsref  # noqa: E402
import saeref  # noqa: E402

F64 = torch.float64

# ---------------------------------------------------------------- transcoders


def _layer_of(hook: str) -> int:
    return int(hook.split(".")[1])


def load_transcoders(dirs: Sequence[str], n_layer: int) -> List[dict]:
    """One transcoder per layer, in layer order, from SAELens folders (one per layer) or one
    circuit-tracer set folder. Each: W_enc [d_model, d_sae] (SAELens layout), b_enc [d_sae],
    W_dec [d_sae, d_model], b_dec [d_model], W_skip [d_model, d_model] or None, and the saeref dict
    that computes its activations."""
    saes = [s for d in dirs for s in saeref.load_folder(d)]
    by_layer = {}
    for s in saes:
        if s["source"] == "circuit-tracer":
            layer, hook_in, hook_out = s["layer"], s["hook_in"], s["hook_out"]
            w_enc = s["W_enc_ct"].T
        else:
            if "transcoder" not in s["architecture"]:
                raise ValueError(f"{s['architecture']} is not a transcoder")
            if s["normalize_activations"] not in ("none", "expected_average_only_in"):
                # an input normalisation would make the encoder input nonlinear in the residual
                raise ValueError(f"normalize_activations {s['normalize_activations']} is not supported")
            layer = _layer_of(s["hook_in"])
            hook_in, hook_out = s["hook_in"].split(".", 2)[2], s["hook_out"].split(".", 2)[2]
            if _layer_of(s["hook_out"]) != layer:
                raise ValueError("a transcoder must read and write the same layer")
            w_enc = s["W_enc"]
        if hook_in not in ("ln2.hook_normalized", "mlp.hook_in"):
            raise ValueError(f"transcoder input {hook_in}: only ln2.hook_normalized / mlp.hook_in")
        if hook_out not in ("hook_mlp_out", "mlp.hook_out"):
            raise ValueError(f"transcoder output {hook_out}: only hook_mlp_out / mlp.hook_out")
        by_layer[layer] = {"sae": s, "W_enc": w_enc, "b_enc": s["b_enc"], "W_dec": s["W_dec"],
                           "b_dec": s["b_dec"], "W_skip": s.get("W_skip")}
    if sorted(by_layer) != list(range(n_layer)):
        raise ValueError(f"need one transcoder per layer 0..{n_layer - 1}, got layers {sorted(by_layer)}")
    return [by_layer[l] for l in range(n_layer)]


def pre_activations(t: dict, x: np.ndarray) -> np.ndarray:
    """The encoder input a feature node's edges add up to: x @ W_enc + b_enc (SAELens
    Transcoder.encode: no b_dec subtraction; circuit-tracer F.linear(x, W_enc, b_enc))."""
    return x @ t["W_enc"] + t["b_enc"]


# ---------------------------------------------------------------- the model


class Frozen:
    """Everything of the real run the frozen model keeps constant, plus the weights it uses."""


def _t(a) -> torch.Tensor:
    return torch.as_tensor(np.asarray(a, np.float64), dtype=F64)


def real_run(model, tokens: Sequence[int]) -> Frozen:
    """Runs hsref's float64 forward and keeps the frozen quantities: per layer the ln1 / ln2
    scales [pos, 1], the attention pattern [head, query_pos, key_pos], the MLP output and the
    transcoder input; ln_final's scale; the logits."""
    fz = Frozen()
    fz.tokens = [int(t) for t in tokens]
    n_pos = len(fz.tokens)
    if isinstance(model, hsref.GPT2Model):
        c = model.config
        fz.family, fz.n_layer, fz.d_model, fz.n_head = "gpt2", c.n_layer, c.d_model, c.n_head
        cache = hsref.forward(model, fz.tokens)
        eps = c.layer_norm_eps

        def ln_scale(x):  # hook_scale of a LayerNorm: sqrt(var + eps), biased variance
            x = x - x.mean(-1, keepdim=True)
            return (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
        w = model.weights
        fz.ln1_scale = [ln_scale(cache[f"blocks.{l}.hook_resid_pre"]) for l in range(c.n_layer)]
        fz.ln2_scale = [ln_scale(cache[f"blocks.{l}.hook_resid_mid"]) for l in range(c.n_layer)]
        fz.lnf_scale = ln_scale(cache[f"blocks.{c.n_layer - 1}.hook_resid_post"])
        fz.ln2_out = [hsref.layer_norm(cache[f"blocks.{l}.hook_resid_mid"], _t(w[f"h.{l}.ln_2.weight"]),
                                       _t(w[f"h.{l}.ln_2.bias"]), eps) for l in range(c.n_layer)]
        fz.W_E = _t(w["wte.weight"])
        fz.W_pos = _t(w["wpe.weight"])[:n_pos]
        fz.W_U = _t(w["lm_head.weight"])                                    # [d_vocab, d_model]
    elif isinstance(model, hsref.LlamaModel):
        c = model.config
        fz.final_softcap = c.final_softcap   # Gemma 2: logit nodes' inputs are the logits before the cap
        fz.family, fz.n_layer, fz.d_model, fz.n_head = "llama", c.n_layer, c.d_model, c.n_head
        fz.gemma = bool(c.post_norms or c.embed_scale or c.norm_plus_one)  # Gemma 2/3 (neuron graphs only)
        fz.post_norms = c.post_norms
        cache = hsref.llama_forward(model, fz.tokens)
        fz.ln1_scale = [cache[f"blocks.{l}.ln1.hook_scale"] for l in range(c.n_layer)]
        fz.ln2_scale = [cache[f"blocks.{l}.ln2.hook_scale"] for l in range(c.n_layer)]
        if c.post_norms:   # Gemma: the attention's and the MLP's outputs pass an RMSNorm, its scale frozen
            fz.ln1_post_scale = [cache[f"blocks.{l}.ln1_post.hook_scale"] for l in range(c.n_layer)]
            fz.ln2_post_scale = [cache[f"blocks.{l}.ln2_post.hook_scale"] for l in range(c.n_layer)]
        fz.lnf_scale = cache["ln_final.hook_scale"]
        fz.ln2_out = [cache[f"blocks.{l}.ln2.hook_normalized"] for l in range(c.n_layer)]
        fz.W_E = _t(model.weights["embed_tokens.weight"])
        if c.embed_scale:
            fz.W_E = fz.W_E * math.sqrt(c.d_model)      # Gemma2Model.forward's normalizer
        fz.W_pos = None
        fz.W_U = _t(model.weights.get("lm_head.weight", model.weights["embed_tokens.weight"]))
    elif isinstance(model, hsref.NeoXModel):
        c = model.config
        fz.family, fz.n_layer, fz.d_model, fz.n_head = "neox", c.n_layer, c.d_model, c.n_head
        fz.parallel = c.parallel
        cache = hsref.neox_forward(model, fz.tokens)
        eps = c.layer_norm_eps

        def ln_scale(x):
            x = x - x.mean(-1, keepdim=True)
            return (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
        fz.ln1_scale = [ln_scale(cache[f"blocks.{l}.hook_resid_pre"]) for l in range(c.n_layer)]
        # a parallel block's MLP reads the block's input, a sequential one resid_mid
        fz.ln2_scale = [ln_scale(cache[f"blocks.{l}.hook_resid_pre" if c.parallel else f"blocks.{l}.hook_resid_mid"])
                        for l in range(c.n_layer)]
        fz.lnf_scale = ln_scale(cache[f"blocks.{c.n_layer - 1}.hook_resid_post"])
        fz.W_E = _t(model.weights["embed_in.weight"])
        fz.W_pos = None
        fz.W_U = _t(model.weights["embed_out.weight"])
    else:
        raise NotImplementedError(f"{type(model).__name__}: the graph reference covers GPT-2 and Llama")
    fz.model = model
    fz.pattern = [cache[f"blocks.{l}.attn.hook_pattern"] for l in range(fz.n_layer)]
    fz.mlp_out = [cache[f"blocks.{l}.hook_mlp_out"] for l in range(fz.n_layer)]
    fz.logits = cache["logits"]
    fz.cache = cache
    return fz


def _attention_frozen(fz: Frozen, l: int, x):
    """Attention with the pattern frozen: linear in x [pos, d_model] (values, W_O, biases)."""
    m, n_pos = fz.model, x.shape[0]
    w = lambda name: _t(m.weights[name])  # noqa: E731
    if fz.family == "gpt2":
        H, D = fz.n_head, fz.d_model
        dh = D // H
        qkv_w, qkv_b = w(f"h.{l}.attn.c_attn.weight"), w(f"h.{l}.attn.c_attn.bias")
        v = (x @ qkv_w[:, 2 * D:] + qkv_b[2 * D:]).reshape(n_pos, H, dh)   # [pos, head, d_head]
        z = torch.einsum("hqk,khd->qhd", fz.pattern[l], v)
        return z.reshape(n_pos, D) @ w(f"h.{l}.attn.c_proj.weight") + w(f"h.{l}.attn.c_proj.bias")
    if fz.family == "neox":
        c = m.config
        H, dh, D = c.n_head, c.d_head, c.d_model
        p = f"layers.{l}.attention."
        qkv = x @ w(p + "query_key_value.weight").T + w(p + "query_key_value.bias")
        if c.qkv_split == "per_head":
            v = qkv.view(n_pos, H, 3 * dh)[..., 2 * dh:]
        else:
            v = qkv[:, 2 * D:].reshape(n_pos, H, dh)
        z = torch.einsum("hqk,khd->qhd", fz.pattern[l], v)
        return z.reshape(n_pos, D) @ w(p + "dense.weight").T + w(p + "dense.bias")
    c = m.config
    H, KV, dh = c.n_head, c.n_kv, c.d_head
    p = f"layers.{l}.self_attn."
    v = x @ w(p + "v_proj.weight").T
    if c.qkv_bias:
        v = v + w(p + "v_proj.bias")
    v = v.reshape(n_pos, KV, dh)
    group = H // KV
    v_h = v[:, [h // group for h in range(H)], :]                          # repeat_kv
    z = torch.einsum("hqk,khd->qhd", fz.pattern[l], v_h)
    out = z.reshape(n_pos, H * dh) @ w(p + "o_proj.weight").T
    return out + w(p + "o_proj.bias") if c.o_bias else out


def _norm_frozen(fz: Frozen, which: str, l: int, x, scale):
    """A norm whose scale is a constant: LayerNorm keeps its centring, RMSNorm is x / scale * w."""
    m = fz.model
    if fz.family == "gpt2":
        name = {"ln1": f"h.{l}.ln_1", "ln2": f"h.{l}.ln_2", "lnf": "ln_f"}[which]
        xc = x - x.mean(-1, keepdim=True)
        return xc / scale * _t(m.weights[name + ".weight"]) + _t(m.weights[name + ".bias"])
    if fz.family == "neox":
        name = {"ln1": f"layers.{l}.input_layernorm", "ln2": f"layers.{l}.post_attention_layernorm",
                "lnf": "final_layer_norm"}[which]
        xc = x - x.mean(-1, keepdim=True)
        return xc / scale * _t(m.weights[name + ".weight"]) + _t(m.weights[name + ".bias"])
    c = m.config
    # Gemma: ln2 is pre_feedforward_layernorm; post_attention_layernorm and post_feedforward_layernorm
    # are the post-norms (ln1_post, ln2_post); every weight is used as 1 + w.
    name = {"ln1": f"layers.{l}.input_layernorm",
            "ln2": f"layers.{l}.pre_feedforward_layernorm" if c.post_norms else f"layers.{l}.post_attention_layernorm",
            "ln1_post": f"layers.{l}.post_attention_layernorm", "ln2_post": f"layers.{l}.post_feedforward_layernorm",
            "lnf": "norm"}[which]
    weight = _t(m.weights[name + ".weight"])
    return x / scale * (1.0 + weight if c.norm_plus_one else weight)


class Graph:
    """The unpruned graph. Node order (circuit-tracer's): features, errors (layer-major),
    tokens, logits. adjacency [n_nodes, n_nodes]: rows targets, columns sources."""


def attribution_graph(model_dir: str, transcoder_dirs: Sequence[str], tokens: Sequence[int],
                      max_n_logits: int = 10, desired_logit_prob: float = 0.95,
                      zero_positions: int = 1) -> Graph:
    """circuit-tracer's attribute() in float64. `transcoder_dirs`: SAELens folders (one per
    layer) or one circuit-tracer set folder. `zero_positions`: the first positions whose
    features and errors are zeroed (circuit-tracer main: always 1, the special token it makes
    sure starts the prompt)."""
    model = hsref.load_any(model_dir)
    fz = real_run(model, tokens)
    if fz.family == "neox" or getattr(fz, "gemma", False) or getattr(fz, "final_softcap", None) is not None:
        raise NotImplementedError("transcoder graphs: the reference covers GPT-2 and Llama")
    tcs = load_transcoders(transcoder_dirs if not isinstance(transcoder_dirs, str) else [transcoder_dirs],
                           fz.n_layer)
    n_layer, n_pos, D = fz.n_layer, len(fz.tokens), fz.d_model

    # --- features and errors (compute_attribution_components)
    acts_l, pre_l, err_l, rest_l = [], [], [], []
    for l, t in enumerate(tcs):
        x = fz.ln2_out[l].numpy()
        acts, _ = saeref.run(t["sae"], x)                  # [pos, d_sae]
        acts = acts.copy()
        acts[:zero_positions] = 0
        pre = pre_activations(t, x)
        skip = x @ t["W_skip"].T if t["W_skip"] is not None else np.zeros_like(x)
        recon = acts @ t["W_dec"] + t["b_dec"] + skip
        err = fz.mlp_out[l].numpy() - recon
        rest = np.zeros_like(err)                          # the unattributed MLP output at zeroed positions
        rest[:zero_positions] = err[:zero_positions]
        err[:zero_positions] = 0
        acts_l.append(acts), pre_l.append(pre), err_l.append(err), rest_l.append(rest)
    feats = [(l, p, f) for l in range(n_layer) for p in range(n_pos) for f in np.nonzero(acts_l[l][p])[0]]
    active = np.array(feats, dtype=np.int64).reshape(-1, 3)
    n_feat = len(feats)
    activations = np.array([acts_l[l][p, f] for l, p, f in feats])

    # --- logit targets (compute_salient_logits)
    probs = torch.softmax(fz.logits[-1], dim=-1)
    top_p, top_idx = torch.topk(probs, max_n_logits)
    cutoff = int(torch.searchsorted(torch.cumsum(top_p, 0), torch.tensor(desired_logit_prob, dtype=F64))) + 1
    top_p, top_idx = top_p[:cutoff], top_idx[:cutoff]
    n_logit = len(top_idx)
    demeaned = fz.W_U[top_idx] - fz.W_U.mean(0, keepdim=True)            # [n_logit, d_model]

    # --- the frozen linear model as a function of the source multipliers
    n_src = n_feat + n_layer * n_pos + n_pos
    W_E_tok = fz.W_E[torch.tensor(fz.tokens)]                              # [pos, d_model]
    feat_by_layer = [[i for i, (l, _, _) in enumerate(feats) if l == layer] for layer in range(n_layer)]
    dec_vec = [torch.zeros(0, D, dtype=F64) for _ in range(n_layer)]
    for l in range(n_layer):
        idx = feat_by_layer[l]
        if idx:
            a = _t(activations[idx])[:, None]
            dec_vec[l] = a * _t(tcs[l]["W_dec"][[feats[i][2] for i in idx]])  # a_f W_dec[f]

    def target_inputs(s):
        """[n_feat + n_logit] target inputs for source multipliers s [n_src]."""
        s_feat = s[:n_feat]
        s_err = s[n_feat:n_feat + n_layer * n_pos].reshape(n_layer, n_pos)
        s_tok = s[n_feat + n_layer * n_pos:]
        resid = s_tok[:, None] * W_E_tok                                  # [pos, d_model]
        if fz.W_pos is not None:
            resid = resid + fz.W_pos                                      # a constant, not a node
        feat_in = torch.zeros(n_feat, dtype=F64)
        for l in range(n_layer):
            x = _norm_frozen(fz, "ln1", l, resid, fz.ln1_scale[l])
            resid = resid + _attention_frozen(fz, l, x)
            x = _norm_frozen(fz, "ln2", l, resid, fz.ln2_scale[l])        # the transcoder's input
            idx = feat_by_layer[l]
            if idx:
                f_ids = [feats[i][2] for i in idx]
                f_pos = [feats[i][1] for i in idx]
                w_enc = _t(tcs[l]["W_enc"][:, f_ids])                      # [d_model, n]
                pre = (x[f_pos] * w_enc.T).sum(-1) + _t(tcs[l]["b_enc"][f_ids])
                feat_in = feat_in.index_put((torch.tensor(idx),), pre)
            out = _t(tcs[l]["b_dec"]) + _t(rest_l[l]) + s_err[l][:, None] * _t(err_l[l])
            if tcs[l]["W_skip"] is not None:
                out = out + x @ _t(tcs[l]["W_skip"]).T
            if idx:
                contrib = s_feat[idx][:, None] * dec_vec[l]
                out = out.index_add(0, torch.tensor([feats[i][1] for i in idx]), contrib)
            resid = resid + out
        final = _norm_frozen(fz, "lnf", 0, resid, fz.lnf_scale)
        logit_in = final[-1] @ demeaned.T
        return torch.cat([feat_in, logit_in]), final

    ones = torch.ones(n_src, dtype=F64, requires_grad=True)
    inputs, final = target_inputs(ones)
    rows = torch.zeros(n_feat + n_logit, n_src, dtype=F64)
    for i in range(n_feat + n_logit):
        (g,) = torch.autograd.grad(inputs[i], ones, retain_graph=True, allow_unused=True)
        if g is not None:
            rows[i] = g
    with torch.no_grad():
        constants, _ = target_inputs(torch.zeros(n_src, dtype=F64))

    n_nodes = n_src + n_logit
    adjacency = np.zeros((n_nodes, n_nodes))
    adjacency[:n_feat, :n_src] = rows[:n_feat].numpy()
    adjacency[n_src:, :n_src] = rows[n_feat:].numpy()
    node_input = np.zeros(n_nodes)
    node_constant = np.zeros(n_nodes)
    node_input[:n_feat] = inputs[:n_feat].detach().numpy()
    node_input[n_src:] = inputs[n_feat:].detach().numpy()
    node_constant[:n_feat] = constants[:n_feat].numpy()
    node_constant[n_src:] = constants[n_feat:].numpy()

    g = Graph()
    g.tokens = np.array(fz.tokens)
    g.n_layer, g.n_pos, g.n_feat, g.n_logit = n_layer, n_pos, n_feat, n_logit
    g.n_err, g.feature_type = n_layer * n_pos, "cross layer transcoder"
    g.active_features = active
    g.activations = activations
    g.logit_tokens = top_idx.numpy()
    g.logit_probs = top_p.numpy()
    g.adjacency = adjacency
    g.node_input = node_input
    g.node_constant = node_constant
    g.pre_activations = np.array([pre_l[l][p, f] for l, p, f in feats])   # from the real run
    g.error_vectors = np.stack(err_l)                                     # [layer, pos, d_model]
    g.frozen_logits = (final @ fz.W_U.T).detach()                          # the frozen model's logits at s = 1
    g.real_logits = fz.logits
    g.target_inputs = target_inputs                                       # for the tests
    g.n_src = n_src
    return g


# ---------------------------------------------------------------- MLP neurons as nodes (issue 26, 3a)


def _mlp_weights(fz: Frozen, l: int):
    """(W_in [d_model, d_mlp] of the pre-activation hook_pre (a gated MLP's gate), b_in or None,
    W_out [d_mlp, d_model], b_out or None) in float64, from the checkpoint's own names."""
    w = lambda name: _t(fz.model.weights[name])  # noqa: E731
    if fz.family == "gpt2":
        return (w(f"h.{l}.mlp.c_fc.weight"), w(f"h.{l}.mlp.c_fc.bias"), w(f"h.{l}.mlp.c_proj.weight"),
                w(f"h.{l}.mlp.c_proj.bias"))
    if fz.family == "neox":
        p = f"layers.{l}.mlp."
        return (w(p + "dense_h_to_4h.weight").T, w(p + "dense_h_to_4h.bias"), w(p + "dense_4h_to_h.weight").T,
                w(p + "dense_4h_to_h.bias"))
    p, bias = f"layers.{l}.mlp.", fz.model.config.mlp_bias
    return (w(p + "gate_proj.weight").T, w(p + "gate_proj.bias") if bias else None, w(p + "down_proj.weight").T,
            w(p + "down_proj.bias") if bias else None)


def _salient_logits(fz: Frozen, max_n_logits: int, desired_logit_prob: float):
    probs = torch.softmax(fz.logits[-1], dim=-1)
    top_p, top_idx = torch.topk(probs, max_n_logits)
    cutoff = int(torch.searchsorted(torch.cumsum(top_p, 0), torch.tensor(desired_logit_prob, dtype=F64))) + 1
    return top_p[:cutoff], top_idx[:cutoff]


def neuron_graph(model_dir: str, tokens: Sequence[int], max_n_logits: int = 10,
                 desired_logit_prob: float = 0.95) -> Graph:
    """The graph with MLP neurons as the feature nodes (HeadScope's --neurons; circuit-tracer has
    no such mode, so this is the issue's definition): attention patterns and norm scales frozen as
    above, each MLP's output written as b_out + sum_n post[p, n] W_out[n], of which the node
    neurons' terms carry a multiplier s_n and the rest is constant. A neuron (l, p, n) is a node
    when p >= 1 and its gate is open with a nonzero output: plain MLPs post = act(pre) > 0; gated
    MLPs (post = act(gate) * up) act(gate) > 0 and post != 0. Its input is hook_pre (the gate's
    pre-activation when gated) computed from the frozen ln2 output. No error nodes: at s = 1 the
    MLP output is the real one. Node order: neurons (layer, pos, index), tokens, logits.
    Families: GPT-2, Llama/Qwen (gated), NeoX (parallel or sequential blocks: the MLP reads ln2 of
    the block's input or of resid_mid), Gemma 2/3 (a logit node's input is before the final
    soft-cap, where the logit is linear; embedding times
    sqrt(d_model), norms with 1 + w, the post-attention and post-MLP norms with their scales frozen:
    a neuron's vector then passes the frozen post-MLP norm)."""
    model = hsref.load_any(model_dir)
    fz = real_run(model, tokens)
    n_layer, n_pos, D = fz.n_layer, len(fz.tokens), fz.d_model
    c = model.config
    act = hsref._ACTIVATIONS[c.activation]
    gated = fz.family == "llama"                                          # Llama, Qwen, Gemma: act(gate) * up
    parallel = getattr(fz, "parallel", False)
    post_norms = getattr(fz, "post_norms", False)

    mlp = [_mlp_weights(fz, l) for l in range(n_layer)]
    post_l, feats = [], []
    for l in range(n_layer):
        post = fz.cache[f"blocks.{l}.mlp.hook_post"]                        # [pos, d_mlp]
        pre = fz.cache[f"blocks.{l}.mlp.hook_pre"]
        open_ = (act(pre) > 0) & (post != 0) if gated else post > 0
        open_[0] = False                                                  # position 0: constants
        post_l.append(post)
        feats += [(l, int(p), int(n)) for p, n in torch.nonzero(open_).tolist()]
    feats.sort()
    n_feat = len(feats)
    active = np.array(feats, dtype=np.int64).reshape(-1, 3)
    activations = np.array([float(post_l[l][p, n]) for l, p, n in feats])
    feat_by_layer = [[i for i, (l, _, _) in enumerate(feats) if l == layer] for layer in range(n_layer)]
    const_post = [p.clone() for p in post_l]                              # the non-node neurons' outputs
    for l, p, n in feats:
        const_post[l][p, n] = 0.0

    top_p, top_idx = _salient_logits(fz, max_n_logits, desired_logit_prob)
    n_logit = len(top_idx)
    demeaned = fz.W_U[top_idx] - fz.W_U.mean(0, keepdim=True)
    n_src = n_feat + n_pos
    W_E_tok = fz.W_E[torch.tensor(fz.tokens)]

    def target_inputs(s):
        s_feat, s_tok = s[:n_feat], s[n_feat:]
        resid = s_tok[:, None] * W_E_tok
        if fz.W_pos is not None:
            resid = resid + fz.W_pos
        feat_in = torch.zeros(n_feat, dtype=F64)
        for l in range(n_layer):
            x = _norm_frozen(fz, "ln1", l, resid, fz.ln1_scale[l])
            attn = _attention_frozen(fz, l, x)
            if post_norms:
                attn = _norm_frozen(fz, "ln1_post", l, attn, fz.ln1_post_scale[l])
            mid = resid + attn
            x = _norm_frozen(fz, "ln2", l, resid if parallel else mid, fz.ln2_scale[l])
            resid = mid
            W_in, b_in, W_out, b_out = mlp[l]
            idx = feat_by_layer[l]
            post = const_post[l].clone()
            if idx:
                ps = torch.tensor([feats[i][1] for i in idx])
                ns = torch.tensor([feats[i][2] for i in idx])
                pre = (x[ps] * W_in[:, ns].T).sum(-1)
                if b_in is not None:
                    pre = pre + b_in[ns]
                feat_in = feat_in.index_put((torch.tensor(idx),), pre)
                post = post.index_put((ps, ns), s_feat[idx] * post_l[l][ps, ns])
            out = post @ W_out
            if b_out is not None:
                out = out + b_out
            if post_norms:
                out = _norm_frozen(fz, "ln2_post", l, out, fz.ln2_post_scale[l])
            resid = resid + out
        final = _norm_frozen(fz, "lnf", 0, resid, fz.lnf_scale)
        return torch.cat([feat_in, final[-1] @ demeaned.T]), final

    ones = torch.ones(n_src, dtype=F64, requires_grad=True)
    inputs, final = target_inputs(ones)
    # The Jacobian one target at a time would be n_feat backward passes; torch's batched vjp
    # gives the same rows.
    eye = torch.eye(n_feat + n_logit, dtype=F64)
    (rows,) = torch.autograd.grad(inputs, ones, eye, is_grads_batched=True)
    with torch.no_grad():
        constants, _ = target_inputs(torch.zeros(n_src, dtype=F64))

    n_nodes = n_src + n_logit
    adjacency = np.zeros((n_nodes, n_nodes))
    adjacency[:n_feat, :n_src] = rows[:n_feat].numpy()
    adjacency[n_src:, :n_src] = rows[n_feat:].numpy()
    node_input, node_constant = np.zeros(n_nodes), np.zeros(n_nodes)
    node_input[:n_feat] = inputs[:n_feat].detach().numpy()
    node_input[n_src:] = inputs[n_feat:].detach().numpy()
    node_constant[:n_feat] = constants[:n_feat].numpy()
    node_constant[n_src:] = constants[n_feat:].numpy()

    g = Graph()
    g.tokens = np.array(fz.tokens)
    g.n_layer, g.n_pos, g.n_feat, g.n_logit = n_layer, n_pos, n_feat, n_logit
    g.n_err, g.feature_type = 0, "mlp neuron"
    g.active_features, g.activations = active, activations
    g.logit_tokens, g.logit_probs = top_idx.numpy(), top_p.numpy()
    g.adjacency, g.node_input, g.node_constant = adjacency, node_input, node_constant
    g.pre_activations = np.array([float(fz.cache[f"blocks.{l}.mlp.hook_pre"][p, n]) for l, p, n in feats])
    g.frozen_logits = (final @ fz.W_U.T).detach()
    g.real_logits = fz.logits
    cap = getattr(fz, "final_softcap", None)
    if cap is not None:   # the frozen model's logits through the cap; the real ones before it
        g.frozen_logits = cap * torch.tanh(g.frozen_logits / cap)
        g.real_logits_precap = fz.cache["ln_final.hook_normalized"] @ fz.W_U.T
    g.target_inputs = target_inputs
    g.n_src = n_src
    return g


# ---------------------------------------------------------------- pruning (graph.py)


def normalize_matrix(m: torch.Tensor) -> torch.Tensor:
    a = m.abs()
    return a / a.sum(dim=1, keepdim=True).clamp(min=1e-10)


def compute_influence(A: torch.Tensor, logit_weights: torch.Tensor, max_iter: int = 1000) -> torch.Tensor:
    current = logit_weights @ A
    influence = current.clone()
    it = 0
    while current.any():
        if it >= max_iter:
            raise RuntimeError(f"Influence computation failed to converge after {it} iterations")
        current = current @ A
        influence += current
        it += 1
    return influence


def find_threshold(scores: torch.Tensor, threshold: float):
    sorted_scores = torch.sort(scores, descending=True).values
    cumulative = torch.cumsum(sorted_scores, dim=0) / torch.sum(sorted_scores)
    i = int(torch.searchsorted(cumulative, torch.tensor(threshold, dtype=cumulative.dtype)).item())
    i = min(i, len(cumulative) - 1)
    return sorted_scores[i]


def prune(adjacency, n_tokens: int, n_logits: int, n_features: int, logit_probs,
          node_threshold: float = 0.8, edge_threshold: float = 0.98):
    """prune_graph in float64: (node_mask [n] bool, edge_mask [n, n] bool, cumulative_scores [n],
    node_influence [n]), numpy."""
    if not 0.0 <= node_threshold <= 1.0 or not 0.0 <= edge_threshold <= 1.0:
        raise ValueError("thresholds must be between 0.0 and 1.0")
    adj = torch.as_tensor(np.asarray(adjacency, np.float64))
    n = adj.shape[0]
    logit_weights = torch.zeros(n, dtype=F64)
    logit_weights[-n_logits:] = torch.as_tensor(np.asarray(logit_probs, np.float64))

    node_influence = compute_influence(normalize_matrix(adj), logit_weights)
    node_mask = node_influence >= find_threshold(node_influence, node_threshold)
    node_mask[-n_logits - n_tokens:] = True

    pruned = adj.clone()
    pruned[~node_mask] = 0
    pruned[:, ~node_mask] = 0
    normalized_pruned = normalize_matrix(pruned)
    pruned_influence = compute_influence(normalized_pruned, logit_weights) + logit_weights
    edge_scores = normalized_pruned * pruned_influence[:, None]
    edge_mask = edge_scores >= find_threshold(edge_scores.flatten(), edge_threshold)

    old = node_mask.clone()
    node_mask[:-n_logits - n_tokens] &= edge_mask[:, :-n_logits - n_tokens].any(0)
    node_mask[:n_features] &= edge_mask[:n_features].any(1)
    while not torch.all(node_mask == old):
        old[:] = node_mask
        edge_mask[~node_mask] = False
        edge_mask[:, ~node_mask] = False
        node_mask[:-n_logits - n_tokens] &= edge_mask[:, :-n_logits - n_tokens].any(0)
        node_mask[:n_features] &= edge_mask[:n_features].any(1)

    # stable, so that equal influences keep node order (circuit-tracer's torch.sort is not stable)
    sorted_scores, order = torch.sort(node_influence, descending=True, stable=True)
    cumulative = torch.cumsum(sorted_scores, dim=0) / torch.sum(sorted_scores)
    cumulative_scores = torch.zeros_like(node_influence)
    cumulative_scores[order] = cumulative
    return node_mask.numpy(), edge_mask.numpy(), cumulative_scores.numpy(), node_influence.numpy()


# ---------------------------------------------------------------- JSON (create_graph_files)


def cantor(x: int, y: int) -> int:
    return (x + y) * (x + y + 1) // 2 + y


def node_json(g: Graph, i: int, cumulative_scores, decode) -> dict:
    """One node as frontend/graph_models.py Node writes it (error ids in the later "{layer}_-1_{pos}" form)."""
    base = {"token_prob": 0.0, "is_target_logit": False, "run_idx": 0, "reverse_ctx_idx": 0, "clerp": ""}
    err0 = g.n_feat
    tok0 = err0 + g.n_err
    log0 = tok0 + g.n_pos
    infl = float(cumulative_scores[i])
    if i < err0:
        l, p, f = (int(v) for v in g.active_features[i])
        d = {"node_id": f"{l}_{f}_{p}", "feature": cantor(l, f), "layer": str(l), "ctx_idx": p,
             "feature_type": g.feature_type, "jsNodeId": f"{l}_{f}-0",
             "influence": infl, "activation": float(g.activations[i])}
    elif i < tok0:
        l, p = divmod(i - err0, g.n_pos)
        d = {"node_id": f"{l}_-1_{p}", "feature": -1, "layer": str(l), "ctx_idx": p,
             "feature_type": "mlp reconstruction error", "jsNodeId": f"{l}_-1-{p}",
             "influence": infl, "activation": None}
    elif i < log0:
        p = i - tok0
        t = int(g.tokens[p])
        d = {"node_id": f"E_{t}_{p}", "feature": p, "layer": "E", "ctx_idx": p, "feature_type": "embedding",
             "jsNodeId": f"E_{t}-{p}", "influence": infl, "activation": None}
    else:
        k = i - log0
        t, prob, p, layer = int(g.logit_tokens[k]), float(g.logit_probs[k]), g.n_pos - 1, str(g.n_layer + 1)
        d = {"node_id": f"{layer}_{t}_{p}", "feature": t, "layer": layer, "ctx_idx": p, "feature_type": "logit",
             "token_prob": prob, "is_target_logit": k == 0, "jsNodeId": f"L_{t}-{p}",
             "clerp": f'Output "{decode([t])}" (p={prob:.3f})', "influence": None, "activation": None}
    out = dict(base)
    out.update(d)
    order = ["node_id", "feature", "layer", "ctx_idx", "feature_type", "token_prob", "is_target_logit",
             "run_idx", "reverse_ctx_idx", "jsNodeId", "clerp", "influence", "activation"]
    return {k: out[k] for k in order}


def graph_json(g: Graph, node_mask, edge_mask, cumulative_scores, decode, slug: str, scan: str,
               node_threshold: float, edge_threshold: float, max_n_logits: int, desired_logit_prob: float) -> dict:
    """create_nodes + create_used_nodes_and_edges + build_model."""
    nodes = {int(i): node_json(g, int(i), cumulative_scores, decode) for i in np.nonzero(node_mask)[0]}
    dsts, srcs = np.nonzero(edge_mask)                         # row-major: by target, then source
    links = [{"source": nodes[s]["node_id"], "target": nodes[d]["node_id"], "weight": float(g.adjacency[d, s])}
             for d, s in zip(dsts.tolist(), srcs.tolist()) if s in nodes and d in nodes]
    connected = {e["source"] for e in links} | {e["target"] for e in links}
    used = [n for n in nodes.values() if n["node_id"] in connected or n["feature_type"] in ("embedding", "logit")]
    meta = {"slug": slug, "scan": scan, "transcoder_list": [],
            "prompt_tokens": [decode([int(t)]) for t in g.tokens], "prompt": decode([int(t) for t in g.tokens]),
            "node_threshold": node_threshold, "schema_version": 1,
            "generation_settings": {"max_n_logits": max_n_logits, "desired_logit_prob": desired_logit_prob},
            "pruning_settings": {"node_threshold": node_threshold, "edge_threshold": edge_threshold}}
    qparams = {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": ""}
    return {"metadata": meta, "qParams": qparams, "nodes": used, "links": links}


# ---------------------------------------------------------------- CLI


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--transcoders", required=True, nargs="+")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--node-threshold", type=float, default=0.8)
    ap.add_argument("--edge-threshold", type=float, default=0.98)
    ap.add_argument("-o", help="write the arrays as .npz")
    a = ap.parse_args(argv)
    g = attribution_graph(a.model, a.transcoders, [int(t) for t in a.tokens.split(",")])
    nm, em, cs, infl = prune(g.adjacency, g.n_pos, g.n_logit, g.n_feat, g.logit_probs,
                             a.node_threshold, a.edge_threshold)
    print(f"{g.n_feat} features, {len(g.adjacency)} nodes, logits {g.logit_tokens.tolist()} "
          f"p {np.round(g.logit_probs, 4).tolist()}; kept {int(nm.sum())} nodes, {int(em.sum())} edges")
    if a.o:
        np.savez(a.o, adjacency=g.adjacency, node_mask=nm.astype(np.int32), cumulative_scores=cs,
                 node_influence=infl)
    return 0


if __name__ == "__main__":
    sys.exit(main())
