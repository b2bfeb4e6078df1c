#!/usr/bin/python3
"""Checks of graphref.py (the float64 attribution-graph reference) and of the fixtures it wrote.

    /usr/bin/python3 tools/reference/test_graphref.py

(a) the frozen replacement model, with error nodes, reproduces hsref's logits (1e-10);
(b) completeness: every target's incoming edges plus its constant equal its input (1e-10 of the
    row's scale), and the inputs are the real pre-activations / demeaned logits;
(c) edges without autograd: switching one source off in the frozen model changes every target's
    input by its column (forward passes only), and token -> layer-0 feature edges of the GPT-2
    model written out by hand in numpy from the weights and the run's scales and patterns;
(d) pruning on a hand-made graph whose masks and scores are worked out in the comments;
(e) the fixtures in tests/fixtures/graph equal a fresh computation, and graph.json is valid
    against Neuronpedia's graph-schema.json and agrees with the masks;
(f) neuron graphs (builtin_neurons, llama_neurons, neox_neurons, gemma_neurons, gemma2_neurons): (a)-(c) and (e) as above, no error nodes, the
    node set by the rule read from hsref's run, the MLP output rebuilt from the node neurons'
    vectors and the constant ones, token -> layer-0 neuron edges by hand.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import graphref  # noqa: E402
import hsref  # noqa: E402
import make_graph_fixtures as mgf  # noqa: E402

FAILED = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}")
    if not ok:
        FAILED.append(name)


BUILTIN = os.path.join(ROOT, "resources/models/headscope-tiny")
BUILTIN_TC = [os.path.join(BUILTIN, "saes", f"transcoder_{i}") for i in range(4)]
LLAMA = os.path.join(ROOT, "tests/fixtures/models/llama_gqa")
LLAMA_TC = [os.path.join(ROOT, "tests/fixtures/graph/llama/transcoders", f"layer_{i}") for i in range(2)]


def target_rows(g):
    return np.r_[0:g.n_feat, g.n_src:len(g.adjacency)]


def check_model(name, g):
    # (a)
    d = (g.frozen_logits - g.real_logits).abs().max().item()
    check(f"{name}: frozen model logits = real logits", d < 1e-10, f"max |diff| {d:.2e}")
    # (b)
    rows = target_rows(g)
    resid = g.adjacency[rows].sum(1) + g.node_constant[rows] - g.node_input[rows]
    scale = np.abs(g.adjacency[rows]).sum(1) + np.abs(g.node_constant[rows]) + 1.0
    r = np.abs(resid / scale).max()
    check(f"{name}: completeness, every row", r < 1e-10, f"max |row sum + constant - input| / scale {r:.2e}")
    d = np.abs(g.pre_activations - g.node_input[:g.n_feat]).max()
    check(f"{name}: feature inputs = real pre-activations", d < 1e-10, f"{d:.2e}")
    lg = getattr(g, "real_logits_precap", g.real_logits)[-1].numpy()   # Gemma 2: before the final cap
    d = np.abs(g.node_input[g.n_src:] - (lg[g.logit_tokens] - lg.mean())).max()
    check(f"{name}: logit inputs = demeaned real logits", d < 1e-10, f"{d:.2e}")
    check(f"{name}: no feature at position 0", not (g.active_features[:, 1] == 0).any())
    err0 = g.n_feat
    if g.n_err:
        pos0_err_cols = [err0 + l * g.n_pos for l in range(g.n_layer)]
        check(f"{name}: position-0 error columns are zero", not g.adjacency[:, pos0_err_cols].any())
    else:
        check(f"{name}: no error nodes", g.n_src == g.n_feat + g.n_pos)
    # (c) switch sources off one at a time (forward passes, no autograd)
    rng = np.random.default_rng(0)
    cols = sorted(set(rng.choice(g.n_src, 12, replace=False).tolist()) |
                  {g.n_src - 1, g.n_feat + g.n_err - 1, g.n_feat - 1})
    worst = 0.0
    with torch.no_grad():
        base, _ = g.target_inputs(torch.ones(g.n_src, dtype=torch.float64))
        for j in cols:
            s = torch.ones(g.n_src, dtype=torch.float64)
            s[j] = 0.0
            off, _ = g.target_inputs(s)
            col = g.adjacency[rows, j]
            worst = max(worst, np.abs((base - off).numpy() - col).max() / (np.abs(col).max() + 1e-12))
    check(f"{name}: {len(cols)} columns = input change when the source is switched off", worst < 1e-9,
          f"max rel diff {worst:.2e}")


def token_to_layer0_by_hand(g, model_dir, tc_dir, neurons=False):
    """GPT-2: edge (layer-0 feature (0, p, f)) <- (token q), from the weights in numpy.
    The frozen model: resid_mid[p] = e_p + W_pos[p] + b_O + sum_h pattern[h, p, q] LN1_q(e_q) W_V[h] W_O[h] (+ biases);
    the token q's multiplier enters through e_q = s_q W_E[t_q]; LN1 and LN2 with frozen scales are
    (x - mean(x)) / scale * w (+ b, a constant)."""
    m = hsref.load_gpt2(model_dir)
    cache = hsref.forward(m, g.tokens.tolist())
    w = {k: np.asarray(v, np.float64) for k, v in m.weights.items()}
    if neurons:   # a neuron's input column is W_in's (c_fc)
        sae = {"W_enc": w["h.0.mlp.c_fc.weight"]}
    else:
        (sae,) = graphref.saeref.load_folder(tc_dir)
    D, H = m.config.d_model, m.config.n_head
    dh = D // H
    pattern = cache["blocks.0.attn.hook_pattern"].numpy()               # [head, query_pos, key_pos]

    def scale(x):
        xc = x - x.mean(-1, keepdims=True)
        return np.sqrt((xc ** 2).mean(-1, keepdims=True) + m.config.layer_norm_eps)
    s1 = scale(cache["blocks.0.hook_resid_pre"].numpy())
    s2 = scale(cache["blocks.0.hook_resid_mid"].numpy())
    centre = lambda v: v - v.mean(-1, keepdims=True)                    # noqa: E731
    W_V = w["h.0.attn.c_attn.weight"][:, 2 * D:]
    W_O = w["h.0.attn.c_proj.weight"]
    worst, tok0 = 0.0, g.n_feat + g.n_err
    for i, (l, p, f) in enumerate(g.active_features):
        if l != 0:
            continue
        for q in range(p + 1):
            e = w["wte.weight"][g.tokens[q]]
            x1 = centre(e) / s1[q] * w["h.0.ln_1.weight"]
            v = (x1 @ W_V).reshape(H, dh)
            attn = sum(pattern[h, p, q] * v[h] @ W_O[h * dh:(h + 1) * dh] for h in range(H))
            dmid = attn + (e if q == p else 0.0)
            x2 = centre(dmid) / s2[p] * w["h.0.ln_2.weight"]
            edge = x2 @ sae["W_enc"][:, f]
            worst = max(worst, abs(edge - g.adjacency[i, tok0 + q]) / (abs(edge) + 1e-6))
    return worst


def check_neurons(name, g, model_dir):
    """The node set by the rule (pos >= 1; plain MLP: hook_post > 0; gated: act(gate) > 0 and
    hook_post != 0), read from hsref's run, and the MLP output rebuilt from the nodes' vectors
    plus the constants is the real hook_mlp_out (what makes error nodes unnecessary)."""
    m = hsref.load_any(model_dir)
    gated = isinstance(m, hsref.LlamaModel)
    cache = hsref.forward_any(m, g.tokens.tolist())
    want = set()
    for l in range(g.n_layer):
        post = cache[f"blocks.{l}.mlp.hook_post"].numpy()
        if gated:
            up = cache[f"blocks.{l}.mlp.hook_pre_linear"].numpy()
            on = (post != 0) & (np.sign(post) == np.sign(up))     # act(gate) = post / up > 0
        else:
            on = post > 0
        on[0] = False
        want |= {(l, int(p), int(n)) for p, n in zip(*np.nonzero(on))}
    got = {tuple(int(v) for v in f) for f in g.active_features}
    check(f"{name}: neuron nodes = the rule's", got == want, f"{len(got)} vs {len(want)}")
    fz = graphref.real_run(m, g.tokens.tolist())
    worst = 0.0
    for l in range(g.n_layer):
        post = cache[f"blocks.{l}.mlp.hook_post"].numpy()
        _, _, w_out, b_out = (None if t is None else t.numpy() for t in graphref._mlp_weights(fz, l))
        node = np.zeros_like(post)
        for (ll, p, n), a in zip(g.active_features, g.activations):
            if ll == l:
                node[p, n] = a
        rebuilt = node @ w_out + (post - node) @ w_out + (0.0 if b_out is None else b_out)
        if getattr(fz, "post_norms", False):
            rebuilt = graphref._norm_frozen(fz, "ln2_post", l, torch.as_tensor(rebuilt), fz.ln2_post_scale[l]).numpy()
        worst = max(worst, np.abs(rebuilt - cache[f"blocks.{l}.hook_mlp_out"].numpy()).max())
    check(f"{name}: node vectors + constants = hook_mlp_out", worst < 1e-10, f"{worst:.2e}")


def check_prune_by_hand():
    # Nodes [f0, f1, e, t, L]: 2 features, 1 layer x 1 position of errors, 1 token, 1 logit (p = 1).
    # Rows targets: f0 <- t (2); f1 <- t (1); L <- f0 (6), f1 (1), e (1), t (2).
    A = np.zeros((5, 5))
    A[0, 3], A[1, 3] = 2, 1
    A[4, 0], A[4, 1], A[4, 2], A[4, 3] = 6, 1, 1, 2
    # Row-normalised: f0: t 1; f1: t 1; L: f0 .6, f1 .1, e .1, t .2.
    # influence = w A + w A^2 = [.6, .1, .1, .2, 0] + [0, 0, 0, .6 + .1, 0] = [.6, .1, .1, .9, 0].
    # find_threshold(., .8): sorted [.9, .6, .1, .1, 0] / 1.7 cumulative [.529, .882, .941, 1, 1]
    # -> index 1 -> .6: f0 and t pass; tokens and logits forced: node mask [1, 0, 0, 1, 1].
    # Pruned rows: f0: t 1; L: f0 .75, t .25; influence [.75, 0, 0, .25 + .75, 0] + w = [.75, 0, 0, 1, 1].
    # Edge scores: f0<-t .75 (row influence .75), L<-f0 .75, L<-t .25; cumulative / 1.75 = [.43, .86, 1].
    # edge .98 -> index 2 -> .25: all three edges; edge .8 -> index 1 -> .75: L<-t dropped.
    # Cumulative scores: t .9/1.7, f0 1.5/1.7, f1 1.6/1.7, e 1, L 1 (stable order for the tie f1 = e).
    nm, em, cs, infl = graphref.prune(A, n_tokens=1, n_logits=1, n_features=2, logit_probs=[1.0],
                                      node_threshold=0.8, edge_threshold=0.98)
    check("prune by hand: node influence", np.allclose(infl, [.6, .1, .1, .9, 0], atol=1e-15), str(infl))
    check("prune by hand: node mask", nm.tolist() == [True, False, False, True, True], str(nm.astype(int)))
    check("prune by hand: edges at .98", sorted(zip(*np.nonzero(em))) == [(0, 3), (4, 0), (4, 3)],
          str(sorted(zip(*np.nonzero(em)))))
    check("prune by hand: cumulative scores",
          np.allclose(cs, [1.5 / 1.7, 1.6 / 1.7, 1.0, .9 / 1.7, 1.0], atol=1e-15), str(cs))
    _, em, _, _ = graphref.prune(A, 1, 1, 2, [1.0], 0.8, 0.8)
    check("prune by hand: edges at .8", sorted(zip(*np.nonzero(em))) == [(0, 3), (4, 0)])
    # Removal of a feature left without outgoing edges: [f0, t, L], f0 <- t (1), L <- f0 (.01),
    # L <- t (10). Node threshold 1.0 keeps every node. Edge scores: f0 <- t and L <- f0 about .001
    # each, L <- t .999; cumulative [.998, .999, 1] -> edge threshold .9 keeps L <- t only, so f0
    # has no outgoing edge and is removed.
    B = np.zeros((3, 3))            # [f0, t, L]: 1 feature, no errors (0 layers), 1 token, 1 logit
    B[0, 1], B[2, 0], B[2, 1] = 1.0, 0.01, 10.0
    nm, em, _, _ = graphref.prune(B, 1, 1, 1, [1.0], 1.0, 0.9)
    check("prune by hand: a feature without outgoing edges is removed",
          nm.tolist() == [False, True, True] and sorted(zip(*np.nonzero(em))) == [(2, 1)],
          f"{nm.astype(int)} {sorted(zip(*np.nonzero(em)))}")


def check_fixture(name, g, folder):
    z = np.load(os.path.join(folder, "graph.npz"))
    for k in z.files:
        check(f"{name}: npz {k} dtype", z[k].dtype in (np.int32, np.float64), str(z[k].dtype))
    n = int(z["n_nodes"][0])
    adj = np.zeros((n, n))
    adj[z["edge_rows"], z["edge_cols"]] = z["edge_values"]
    check(f"{name}: fixture adjacency = fresh computation", np.array_equal(adj, g.adjacency))
    nm, em, cs, infl = graphref.prune(adj, g.n_pos, g.n_logit, g.n_feat, z["logit_probs"], 0.8, 0.98)
    check(f"{name}: fixture masks = prune()", np.array_equal(nm.astype(np.int32), z["node_mask"]) and
          np.array_equal(np.stack(np.nonzero(em)), np.stack([z["kept_rows"], z["kept_cols"]])))
    check(f"{name}: fixture scores", np.array_equal(cs, z["cumulative_scores"]) and
          np.array_equal(infl, z["node_influence"]))
    with open(os.path.join(folder, "graph.json"), encoding="utf-8") as f:
        js = json.load(f)
    try:
        import jsonschema
        with open(os.path.join(ROOT, "tests/fixtures/graph/graph-schema.json"), encoding="utf-8") as f:
            schema = json.load(f)
        jsonschema.validate(js, schema)
        check(f"{name}: graph.json valid against graph-schema.json", True)
    except ImportError:
        print("skip graph-schema check: no python3-jsonschema")
    except Exception as e:  # noqa: BLE001
        check(f"{name}: graph.json valid against graph-schema.json", False, str(e)[:300])
    ids = [nd["node_id"] for nd in js["nodes"]]
    check(f"{name}: node ids unique", len(ids) == len(set(ids)))
    kept = {(int(r), int(c)) for r, c in zip(z["kept_rows"], z["kept_cols"]) if z["node_mask"][r] and z["node_mask"][c]}
    check(f"{name}: JSON links = kept edges between kept nodes", len(js["links"]) == len(kept),
          f"{len(js['links'])} vs {len(kept)}")


def main():
    g = graphref.attribution_graph(BUILTIN, BUILTIN_TC, [4095] + mgf.Tokenizer(BUILTIN).encode(mgf.PROMPT_BUILTIN))
    check_model("builtin", g)
    worst = token_to_layer0_by_hand(g, BUILTIN, BUILTIN_TC[0])
    check("builtin: token -> layer-0 feature edges by hand", worst < 1e-9, f"max rel diff {worst:.2e}")
    check_fixture("builtin", g, os.path.join(ROOT, "tests/fixtures/graph/builtin"))
    if all(os.path.exists(d) for d in LLAMA_TC):
        gl = graphref.attribution_graph(LLAMA, LLAMA_TC, mgf.PROMPT_LLAMA)
        check_model("llama", gl)
        check("llama: W_skip is exercised", any(t["W_skip"] is not None for t in graphref.load_transcoders(LLAMA_TC, 2)))
        check_fixture("llama", gl, os.path.join(ROOT, "tests/fixtures/graph/llama"))
    else:
        print("skip llama: run make_graph_fixtures.py first")
    gn = graphref.neuron_graph(BUILTIN, [4095] + mgf.Tokenizer(BUILTIN).encode(mgf.PROMPT_BUILTIN_NEURONS))
    check_model("builtin_neurons", gn)
    check_neurons("builtin_neurons", gn, BUILTIN)
    worst = token_to_layer0_by_hand(gn, BUILTIN, None, neurons=True)
    check("builtin_neurons: token -> layer-0 neuron edges by hand", worst < 1e-9, f"max rel diff {worst:.2e}")
    check_fixture("builtin_neurons", gn, os.path.join(ROOT, "tests/fixtures/graph/builtin_neurons"))
    gn = graphref.neuron_graph(LLAMA, mgf.PROMPT_LLAMA)
    check_model("llama_neurons", gn)
    check_neurons("llama_neurons", gn, LLAMA)
    check_fixture("llama_neurons", gn, os.path.join(ROOT, "tests/fixtures/graph/llama_neurons"))
    for name, model, tokens in (("neox_neurons", "neox_parallel", mgf.PROMPT_LLAMA),
                                ("gemma_neurons", "gemma3_local_global", mgf.PROMPT_LLAMA[:4]),
                                ("gemma2_neurons", "gemma2_window", mgf.PROMPT_LLAMA[:4])):
        model_dir = os.path.join(ROOT, "tests/fixtures/models", model)
        gn = graphref.neuron_graph(model_dir, tokens)
        check_model(name, gn)
        check_neurons(name, gn, model_dir)
        check_fixture(name, gn, os.path.join(ROOT, "tests/fixtures/graph", name))
    check_prune_by_hand()
    print(f"{len(FAILED)} failed" if FAILED else "all passed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
