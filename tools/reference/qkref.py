#!/usr/bin/python3
"""HeadScope's float64 reference for QK tracing (issue 26 item 4), written from the definition in
docs/graph.md ("QK tracing"), not from HeadScope's C++. circuit-tracer (decoderesearch/circuit-tracer
main, 2026-04) has no QK attribution to follow (its issue #53 asks for one).

The residual stream entering layer L at position p is a sum of components taken from hsref's
float64 forward: hook_embed, hook_pos_embed (GPT-2), each earlier head's hook_result, b_O, and
each MLP's output in units: transcoder features (activation x W_dec row), the skip path
(x @ W_skip^T), b_dec and the error (hook_mlp_out minus those), or MLP neurons (hook_post x W_out
row) and b_out. A post-norm (Gemma) scales what passes it by (1 + w) / its hook_scale at p.
With ln1's hook_scale at p (and the q/k norms' hook_scale) held fixed, each component maps
linearly to its share of rot_q (rot_k):
  u = rotate_p( qk_norm_frozen( ln1_frozen(c) @ W_Q[h] ) ),
  ln1_frozen(c) = (c - mean c) / s_p * w (GPT-2's LayerNorm; RMSNorm: c / s_p * w),
and the constant (ln1's bias @ W_Q + b_Q) takes the same q/k norm and rotation. The score
before a soft-cap is scale * (sum u) . (sum v), so term(i, j) = scale * u_i . v_j.

    /usr/bin/python3 tools/reference/qkref.py --model DIR [--transcoders DIR ...] --tokens 1,2,3
        --layer L --head H --query Q --key K
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import List, Optional, Sequence

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import graphref  # noqa: E402  (load_transcoders: one transcoder per layer, SAELens or circuit-tracer)
import hsref  # noqa: E402
import saeref  # noqa: E402

# The kinds, numbered as the fixtures store them (the order of qk_trace.h's QkComponent::Kind).
KINDS = ["embed", "pos_embed", "head", "attn_bias", "feature", "skip", "error", "neuron", "mlp_bias", "constant"]
KIND = {k: i for i, k in enumerate(KINDS)}


class Trace:
    """keys [n, 4] (kind, layer, index, pos) and projected [n, d_head] per side; scale; scores."""


def _np(t) -> np.ndarray:
    return t.detach().numpy().astype(np.float64) if isinstance(t, torch.Tensor) else np.asarray(t, np.float64)


def qk_trace(model_dir: str, tokens: Sequence[int], layer: int, head: int, query: int, key: int,
             transcoder_dirs: Optional[Sequence[str]] = None) -> Trace:
    model = hsref.load_any(model_dir)
    gpt2 = isinstance(model, hsref.GPT2Model)
    if not gpt2 and not isinstance(model, hsref.LlamaModel):
        raise NotImplementedError("the QK reference covers the GPT-2 and Llama families (Qwen, Gemma)")
    c = model.config
    w = {k: np.asarray(v, np.float64) for k, v in model.weights.items()}
    cache = {k: _np(v) for k, v in hsref.forward_any(model, tokens).items()}
    n_pos, D, H, dh = len(tokens), c.d_model, c.n_head, c.d_head
    if not (0 <= key <= query < n_pos):
        raise ValueError("need 0 <= key <= query < n_pos")
    kv = head if gpt2 else head // (H // c.n_kv)
    tcs = graphref.load_transcoders(transcoder_dirs, c.n_layer) if transcoder_dirs else None
    plus = (lambda v: 1.0 + v) if (not gpt2 and c.norm_plus_one) else (lambda v: v)
    eps = c.layer_norm_eps if gpt2 else c.rms_norm_eps

    def components(p: int):
        """[(key tuple, vector [D])] of the stream entering `layer` at p, in stream order."""
        out = [((KIND["embed"], -1, -1, p), cache["hook_embed"][p])]
        if gpt2:
            out.append(((KIND["pos_embed"], -1, -1, p), cache["hook_pos_embed"][p]))
        for l in range(layer):
            b = f"blocks.{l}."
            post1 = post2 = 1.0
            if not gpt2 and c.post_norms:
                post1 = plus(w[f"layers.{l}.post_attention_layernorm.weight"]) / cache[b + "ln1_post.hook_scale"][p]
                post2 = plus(w[f"layers.{l}.post_feedforward_layernorm.weight"]) / cache[b + "ln2_post.hook_scale"][p]
            result = cache[b + "attn.hook_result"][p]                     # [head, d_model]
            for h in range(H):
                out.append(((KIND["head"], l, h, p), result[h] * post1))
            b_o = w[f"h.{l}.attn.c_proj.bias"] if gpt2 else (w[f"layers.{l}.self_attn.o_proj.bias"] if c.o_bias else None)
            if b_o is not None:
                out.append(((KIND["attn_bias"], l, -1, p), b_o * post1))
            if tcs is None:
                post = cache[b + "mlp.hook_post"][p]                      # [d_mlp]
                w_out = w[f"h.{l}.mlp.c_proj.weight"] if gpt2 else w[f"layers.{l}.mlp.down_proj.weight"].T
                for n in np.nonzero(post)[0]:
                    out.append(((KIND["neuron"], l, int(n), p), post[n] * w_out[n] * post2))
                b_out = w[f"h.{l}.mlp.c_proj.bias"] if gpt2 else (w[f"layers.{l}.mlp.down_proj.bias"] if c.mlp_bias else None)
                if b_out is not None:
                    out.append(((KIND["mlp_bias"], l, -1, p), b_out * post2))
            else:
                t = tcs[l]
                if gpt2:
                    x = hsref.layer_norm(torch.as_tensor(cache[b + "hook_resid_mid"]), torch.as_tensor(w[f"h.{l}.ln_2.weight"]),
                                         torch.as_tensor(w[f"h.{l}.ln_2.bias"]), eps).numpy()
                else:
                    x = cache[b + "ln2.hook_normalized"]
                acts, _ = saeref.run(t["sae"], x[p:p + 1])
                parts = []
                for f in np.nonzero(acts[0])[0]:
                    parts.append(((KIND["feature"], l, int(f), p), acts[0, f] * np.asarray(t["W_dec"], np.float64)[f]))
                if t["W_skip"] is not None:
                    parts.append(((KIND["skip"], l, -1, p), x[p] @ np.asarray(t["W_skip"], np.float64).T))
                parts.append(((KIND["mlp_bias"], l, -1, p), np.asarray(t["b_dec"], np.float64)))
                err = cache[b + "hook_mlp_out"][p] - sum(v for _, v in parts)
                out += parts + [((KIND["error"], l, -1, p), err)]
        return out

    def side(p: int, keys: bool):
        """(keys [n, 4], projected [n, d_head], sum of the components [D])."""
        b, lw = f"blocks.{layer}.", f"layers.{layer}."
        resid = cache[b + "hook_resid_pre"][p]
        if gpt2:
            centred = resid - resid.mean()
            s = math.sqrt((centred ** 2).mean() + eps)
            ln_w, ln_b = w[f"h.{layer}.ln_1.weight"], w[f"h.{layer}.ln_1.bias"]
            col = D + kv * dh if keys else head * dh                      # Q | K | V column blocks
            W = w[f"h.{layer}.attn.c_attn.weight"][:, col:col + dh]       # [d_model, d_head]
            bias = w[f"h.{layer}.attn.c_attn.bias"][col:col + dh]
        else:
            s = float(cache[b + "ln1.hook_scale"][p].item())
            ln_w, ln_b = plus(w[lw + "input_layernorm.weight"]), None
            proj = "k_proj" if keys else "q_proj"
            idx = kv if keys else head
            W = w[lw + f"self_attn.{proj}.weight"][idx * dh:(idx + 1) * dh].T
            bias = w[lw + f"self_attn.{proj}.bias"][idx * dh:(idx + 1) * dh] if c.qkv_bias else np.zeros(dh)

        def project(v):
            v = (v - v.mean()) if gpt2 else v
            return finish((v / s * ln_w) @ W)

        def finish(u):
            """The q/k norm with its scale fixed, then the rotation by position p."""
            if not gpt2 and c.qk_norm:
                nn = "k_norm" if keys else "q_norm"
                sc = cache[b + f"attn.{nn}.hook_scale"][p, kv if keys else head].item()
                u = u / sc * plus(w[lw + f"self_attn.{nn}.weight"])
            if not gpt2:
                theta, scaling = c.layer_rope(layer)
                inv = hsref.rope_inv_freq(dh, theta, scaling).numpy()
                ang = p * inv
                half = len(inv)
                a, bb = u[:half].copy(), u[half:2 * half].copy()
                u = u.copy()
                u[:half] = a * np.cos(ang) - bb * np.sin(ang)
                u[half:2 * half] = bb * np.cos(ang) + a * np.sin(ang)
            return u

        comps = components(p)
        keys_ = [k for k, _ in comps] + [(KIND["constant"], layer, kv if keys else head, -1)]
        const = (ln_b @ W if ln_b is not None else np.zeros(dh)) + bias
        proj = [project(v) for _, v in comps] + [finish(const)]
        return np.array(keys_, np.int32), np.array(proj), sum(v for _, v in comps)

    tr = Trace()
    tr.tokens = np.array(tokens, np.int32)
    tr.layer, tr.head, tr.kv_head, tr.query, tr.key = layer, head, kv, query, key
    tr.query_keys, tr.query_u, q_sum = side(query, False)
    tr.key_keys, tr.key_v, k_sum = side(key, True)
    tr.scale = hsref.attention_scale(model, layer)
    tr.terms = tr.scale * tr.query_u @ tr.key_v.T                       # [n_query, n_key]
    tr.total = float(tr.terms.sum())
    tr.score = float(cache[f"blocks.{layer}.attn.hook_attn_scores"][head, query, key])
    if gpt2:
        qv, kvv = cache[f"blocks.{layer}.attn.hook_q"][query, head], cache[f"blocks.{layer}.attn.hook_k"][key, kv]
    else:
        qv, kvv = cache[f"blocks.{layer}.attn.hook_rot_q"][query, head], cache[f"blocks.{layer}.attn.hook_rot_k"][key, kv]
    tr.score_before_softcap = float(tr.scale * qv @ kvv)
    tr.resid_error = max(np.abs(q_sum - cache[f"blocks.{layer}.hook_resid_pre"][query]).max(),
                         np.abs(k_sum - cache[f"blocks.{layer}.hook_resid_pre"][key]).max())
    return tr


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--transcoders", nargs="*")
    ap.add_argument("--tokens", required=True)
    for k in ("--layer", "--head", "--query", "--key"):
        ap.add_argument(k, type=int, required=True)
    ap.add_argument("--top", type=int, default=10)
    a = ap.parse_args(argv)
    t = qk_trace(a.model, [int(x) for x in a.tokens.split(",")], a.layer, a.head, a.query, a.key, a.transcoders)
    print(f"score {t.score:.9g}, before the cap {t.score_before_softcap:.12g}, terms sum {t.total:.12g}, "
          f"components {len(t.query_keys)} x {len(t.key_keys)}, resid error {t.resid_error:.2e}")
    flat = np.argsort(-np.abs(t.terms), axis=None)[:a.top]
    for i in flat:
        qi, ki = divmod(int(i), t.terms.shape[1])
        print(f"  {KINDS[t.query_keys[qi][0]]} {t.query_keys[qi].tolist()} x {KINDS[t.key_keys[ki][0]]} "
              f"{t.key_keys[ki].tolist()}: {t.terms[qi, ki]:.9g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
