#!/usr/bin/python3
"""Writes tests/fixtures/graph: attribution graphs from graphref.py (the float64 reference), each
folder with graph.npz (numpy.savez, stored arrays, int32 / float64 only) and graph.json (the
pruned graph as circuit-tracer's create_graph_files writes it for Neuronpedia).

    /usr/bin/python3 tools/reference/make_graph_fixtures.py [--out tests/fixtures/graph]

  builtin/  resources/models/headscope-tiny with its four transcoders (SAELens jumprelu_transcoder)
  llama/    tests/fixtures/models/llama_gqa (2 layers, GQA, llama3 rope) with tiny random SAELens
            transcoders written here: layer 0 `transcoder`, layer 1 `skip_transcoder` (W_skip)
  builtin_neurons/  the built-in model with MLP neurons as nodes (graphref.neuron_graph), BOS + " dog"
  llama_neurons/    llama_gqa's gated (SiLU) MLP neurons as nodes, the llama prompt
  neox_neurons/     tests/fixtures/models/neox_parallel (parallel blocks, LayerNorm, GELU), the llama prompt
  gemma_neurons/    tests/fixtures/models/gemma3_local_global (post-attention and post-MLP norms,
                    embedding scale, 1 + w norms, gated GELU), the llama prompt's first 4 tokens
  gemma2_neurons/   tests/fixtures/models/gemma2_window (Gemma 2: attention and final logit soft-caps,
                    sliding window), the same 4 tokens
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
import graphref  # noqa: E402
import saeref  # noqa: E402

NODE_THRESHOLD, EDGE_THRESHOLD = 0.8, 0.98
MAX_N_LOGITS, DESIRED_LOGIT_PROB = 10, 0.95


# ---------------------------------------------------------------- GPT-2 byte-level BPE (for ids and labels)


def _bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class Tokenizer:
    """vocab.json + merges.txt, GPT-2's byte-level BPE; enough for plain lower-case words."""

    def __init__(self, folder):
        with open(os.path.join(folder, "vocab.json"), encoding="utf-8") as f:
            self.vocab = json.load(f)
        self.inv = {i: s for s, i in self.vocab.items()}
        with open(os.path.join(folder, "merges.txt"), encoding="utf-8") as f:
            lines = [ln.split() for ln in f.read().split("\n") if ln and not ln.startswith("#version")]
        self.ranks = {tuple(p): i for i, p in enumerate(lines) if len(p) == 2}
        self.b2u = _bytes_to_unicode()
        self.u2b = {u: b for b, u in self.b2u.items()}

    def _bpe(self, word):
        parts = list(word)
        while len(parts) > 1:
            pairs = [(self.ranks.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            rank, i = min(pairs)
            if rank == 1 << 30:
                break
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        return parts

    def encode(self, text):
        import re
        ids = []
        for w in re.findall(r" ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+", text):
            ids += [self.vocab[p] for p in self._bpe("".join(self.b2u[b] for b in w.encode()))]
        return ids

    def decode(self, ids):
        return bytes(self.u2b[c] for i in ids for c in self.inv[int(i)]).decode("utf-8", "replace")


# ---------------------------------------------------------------- writing


def write_fixture(folder, model_dir, transcoder_dirs, tokens, tok, slug, scan):
    """transcoder_dirs None: the neuron graph."""
    if transcoder_dirs is None:
        g = graphref.neuron_graph(model_dir, tokens, MAX_N_LOGITS, DESIRED_LOGIT_PROB)
    else:
        g = graphref.attribution_graph(model_dir, transcoder_dirs, tokens, MAX_N_LOGITS, DESIRED_LOGIT_PROB)
    nm, em, cs, infl = graphref.prune(g.adjacency, g.n_pos, g.n_logit, g.n_feat, g.logit_probs,
                                      NODE_THRESHOLD, EDGE_THRESHOLD)
    rows, cols = np.nonzero(g.adjacency)
    kept_rows, kept_cols = np.nonzero(em)
    i32 = lambda a: np.asarray(a, np.int32)  # noqa: E731
    np.savez(os.path.join(folder, "graph.npz"),
             tokens=i32(g.tokens), active_features=i32(g.active_features).reshape(-1, 3),
             activations=np.asarray(g.activations, np.float64),
             logit_tokens=i32(g.logit_tokens), logit_probs=np.asarray(g.logit_probs, np.float64),
             n_nodes=i32([len(g.adjacency)]),
             edge_rows=i32(rows), edge_cols=i32(cols), edge_values=g.adjacency[rows, cols],
             node_input=g.node_input, node_constant=g.node_constant,
             node_mask=i32(nm), kept_rows=i32(kept_rows), kept_cols=i32(kept_cols),
             cumulative_scores=cs, node_influence=infl)
    js = graphref.graph_json(g, nm, em, cs, tok.decode, slug, scan, NODE_THRESHOLD, EDGE_THRESHOLD,
                             MAX_N_LOGITS, DESIRED_LOGIT_PROB)
    with open(os.path.join(folder, "graph.json"), "w", encoding="utf-8") as f:
        json.dump(js, f, indent=1, ensure_ascii=False)
        f.write("\n")
    return g, nm, em, js


def builtin(out):
    model = os.path.join(ROOT, "resources/models/headscope-tiny")
    tok = Tokenizer(model)
    tokens = [4095] + tok.encode(PROMPT_BUILTIN)
    folder = os.path.join(out, "builtin")
    os.makedirs(folder)
    dirs = [os.path.join(model, "saes", f"transcoder_{i}") for i in range(4)]
    return write_fixture(folder, model, dirs, tokens, tok, "headscope-tiny-repeat", "headscope-tiny")


PROMPT_BUILTIN = " the dog ran. the dog"
# Short: a neuron graph of the built-in model has every positive neuron of 4 x 1024 per position as
# a node (778 here, 65k nonzero edges; " the dog" would be 333k).
PROMPT_BUILTIN_NEURONS = " dog"
PROMPT_LLAMA = [290, 17, 45, 101, 17, 45]   # BOS (290) then ids with no meaning: a random model


def llama_transcoders(folder, d=32, seed=20260611):
    """Tiny random SAELens v6 transcoders for llama_gqa: layer 0 `transcoder` (ReLU), layer 1
    `skip_transcoder`, both ln2.hook_normalized -> hook_mlp_out; b_enc pushed down so a few
    latents fire. Stored float32 (saeref.write_safetensors)."""
    rng = np.random.default_rng(seed)
    dirs = []
    for layer, arch, d_sae in ((0, "transcoder", 48), (1, "skip_transcoder", 40)):
        sub = os.path.join(folder, f"layer_{layer}")
        os.makedirs(sub)
        w = {"W_enc": rng.normal(0, 1 / np.sqrt(d), (d, d_sae)), "W_dec": rng.normal(0, 0.5, (d_sae, d)),
             "b_enc": rng.normal(-0.6, 0.3, d_sae), "b_dec": rng.normal(0, 0.1, d)}
        if arch == "skip_transcoder":
            w["W_skip"] = rng.normal(0, 0.2, (d, d))
        saeref.write_safetensors(os.path.join(sub, "sae_weights.safetensors"),
                                 {k: np.asarray(v, np.float32) for k, v in w.items()})
        cfg = {"architecture": arch, "d_in": d, "d_sae": d_sae, "d_out": d, "dtype": "float32", "device": "cpu",
               "apply_b_dec_to_input": False, "normalize_activations": "none", "reshape_activations": "none",
               "metadata": {"sae_lens_version": "6.5.1", "model_name": "llama_gqa",
                            "hook_name": f"blocks.{layer}.ln2.hook_normalized",
                            "hook_name_out": f"blocks.{layer}.hook_mlp_out"}}
        with open(os.path.join(sub, "cfg.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        dirs.append(sub)
    return dirs


def llama(out):
    model = os.path.join(ROOT, "tests/fixtures/models/llama_gqa")
    folder = os.path.join(out, "llama")
    os.makedirs(folder)
    dirs = llama_transcoders(os.path.join(folder, "transcoders"))
    return write_fixture(folder, model, dirs, PROMPT_LLAMA, Tokenizer(model), "llama-gqa-random", "llama_gqa")


def builtin_neurons(out):
    model = os.path.join(ROOT, "resources/models/headscope-tiny")
    tok = Tokenizer(model)
    folder = os.path.join(out, "builtin_neurons")
    os.makedirs(folder)
    return write_fixture(folder, model, None, [4095] + tok.encode(PROMPT_BUILTIN_NEURONS), tok,
                         "headscope-tiny-neurons", "headscope-tiny")


def llama_neurons(out):
    model = os.path.join(ROOT, "tests/fixtures/models/llama_gqa")
    folder = os.path.join(out, "llama_neurons")
    os.makedirs(folder)
    return write_fixture(folder, model, None, PROMPT_LLAMA, Tokenizer(model), "llama-gqa-neurons", "llama_gqa")


def small_model_neurons(out, name, model_name, tokens):
    model = os.path.join(ROOT, "tests/fixtures/models", model_name)
    folder = os.path.join(out, name)
    os.makedirs(folder)
    return write_fixture(folder, model, None, tokens, Tokenizer(model), model_name + "-neurons", model_name)


FIXTURES = (("builtin", builtin), ("llama", llama), ("builtin_neurons", builtin_neurons),
            ("llama_neurons", llama_neurons),
            ("neox_neurons", lambda out: small_model_neurons(out, "neox_neurons", "neox_parallel", PROMPT_LLAMA)),
            ("gemma_neurons", lambda out: small_model_neurons(out, "gemma_neurons", "gemma3_local_global",
                                                              PROMPT_LLAMA[:4])),
            ("gemma2_neurons", lambda out: small_model_neurons(out, "gemma2_neurons", "gemma2_window", PROMPT_LLAMA[:4])))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/fixtures/graph"))
    ap.add_argument("--only", nargs="+", choices=[n for n, _ in FIXTURES], help="write only these folders")
    a = ap.parse_args()
    todo = [(n, fn) for n, fn in FIXTURES if not a.only or n in a.only]
    for name, _ in todo:
        shutil.rmtree(os.path.join(a.out, name), ignore_errors=True)
    for name, fn in todo:
        g, nm, em, js = fn(a.out)
        print(f"{name}: tokens {g.tokens.tolist()}, {g.n_feat} features, {len(g.adjacency)} nodes, "
              f"{int((g.adjacency != 0).sum())} nonzero edges; logits {g.logit_tokens.tolist()} "
              f"p {np.round(g.logit_probs, 4).tolist()}; pruned: {int(nm.sum())} nodes, {int(em.sum())} edges, "
              f"json {len(js['nodes'])} nodes {len(js['links'])} links")
    return 0


if __name__ == "__main__":
    sys.exit(main())
