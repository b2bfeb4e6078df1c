#!/usr/bin/python3
"""The PyTorch yardstick for `headscope-cli graph`: circuit-tracer's attribution phase in float32,
computed the way circuit-tracer computes it, on GPT-2-architecture models with one transcoder per
layer. A speed yardstick, not a correctness reference (that is tools/reference/graphref.py, float64).

    /usr/bin/python3 tools/bench/torch_graph.py [--model DIR] [--transcoders DIR ...] --tokens 4095,12,34
        [--threads 2] [--batch 64] [--max-feature-nodes 7500] [--read grouped|gather] [--check RAW.npz]

Written from decoderesearch/circuit-tracer (main, 2026):
  replacement_model/replacement_model_transformerlens.py
      _configure_gradient_flow: attention patterns and every norm's hook_scale pass through detach();
          the embedding is where gradients start (hook_embed's enable_gradient).
      _configure_skip_connection: an MLP's output becomes skip + (mlp_out - skip).detach(), with
          skip = x @ W_skip.T, or x * 0 without a skip connection, so the transcoder's input x stays
          on the autograd path (its injection hook must fire) while the MLP is a constant.
      setup_attribution: one unbatched run for the activations, error vectors (position 0 zeroed)
          and token vectors W_E[tokens] (position embeddings are not nodes).
  transcoder/single_layer_transcoder.py  TranscoderSet.compute_attribution_components: features in
      the coalesced sparse order (layer, pos, latent), position 0 zeroed, encoder rows, decoder rows
      times the activation.
  attribution/attribute_transformerlens.py  _run_attribution: the prompt's ids expanded to
      [batch, pos] and run once with the hooks installed (the graph is kept for every backward
      pass); logit rows first, then feature rows, `batch` targets per backward pass; under
      max_feature_nodes the rows are chosen by compute_partial_influences (graph.py), refreshed every
      update_interval batches.
  attribution/context_transformerlens.py  AttributionContext.compute_batch: each target's input
      vector injected as the gradient of its row at its input hook (the transcoder's input, or
      ln_final's output for a logit), by hooks on the cached tensors that overwrite (row, position);
      one backward pass from the highest target layer's tensor with a zero gradient. The rows are
      read by hooks at every MLP output (features: activation x decoder row; errors: error vector)
      and at the embedding (tokens), contracted with the gradient there.

The transcoders are SAELens folders (graphref.load_transcoders); the activations come from
saeref.run on the float32 run's transcoder inputs. An error vector is the MLP output minus the
transcoder's whole output, skip included (as graphref and HeadScope define it).

--read gather contracts a layer's feature rows as circuit-tracer's _compute_score_hook does: the
gradient gathered at every active feature's position, [batch, features, d_model], then one einsum.
--read grouped (the default) gives the same numbers from one [features at p, d_model] x
[d_model, batch] product per position, without the gathered copy; the bench keeps the faster.

Only the rows are timed (phases 3 and 4 of _run_attribution, with the partial-influence refreshes),
after one warm-up batch; the setup run, the batch-expanded forward pass and the assembly of the
dense adjacency are not. Prints `torch graph rows: N rows in X ms (T threads, batch B)`.

--check RAW.npz compares the adjacency with `headscope-cli graph --max-feature-nodes 0 --raw RAW.npz`
(rows targets, columns sources; features, errors, tokens, logits) on the same tokens (taken from
the file when --tokens is not given): the same feature and logit nodes, and every row within 1e-4
of that row's largest |edge|. Exits 1 on a failure.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from openblas_env import reexec_with_best_openblas  # noqa: E402

reexec_with_best_openblas()  # OpenBLAS's best kernel for this CPU, set before numpy and torch load

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools", "reference"))
import graphref  # noqa: E402
import hsref  # noqa: E402
import saeref  # noqa: E402

F32 = torch.float32
BUILTIN = os.path.join(REPO, "resources", "models", "headscope-tiny")


def transcoder_dirs(dirs, model_dir):
    """The folders as given; a folder of SAE folders (the built-in model's saes/) stands for its
    transcoders. Default: the model's saes/."""
    out = []
    for d in dirs or [os.path.join(model_dir, "saes")]:
        if os.path.exists(os.path.join(d, "cfg.json")) or os.path.exists(os.path.join(d, "config.yaml")):
            out.append(d)
            continue
        for sub in sorted(os.listdir(d)):
            cfg = os.path.join(d, sub, "cfg.json")
            if os.path.exists(cfg):
                with open(cfg) as f:
                    if "transcoder" in json.load(f).get("architecture", ""):
                        out.append(os.path.join(d, sub))
    return out


class Weights:
    """The model's and the transcoders' weights as float32 tensors, in the layouts the passes use."""

    def __init__(self, model_dir, dirs):
        model = hsref.load_gpt2(model_dir)
        c = model.config
        self.c, self.n_layer, self.d_model, self.n_head, self.eps = c, c.n_layer, c.d_model, c.n_head, c.layer_norm_eps
        self.act = hsref._ACTIVATIONS[c.activation]
        self.w = {k: torch.from_numpy(np.asarray(v, np.float32)) for k, v in model.weights.items()}
        self.tcs = graphref.load_transcoders(dirs, c.n_layer)
        for t in self.tcs:
            t["W_enc32"] = torch.from_numpy(np.ascontiguousarray(t["W_enc"].T, np.float32))  # [d_sae, d_model]
            t["W_dec32"] = torch.from_numpy(np.asarray(t["W_dec"], np.float32))              # [d_sae, d_model]
            t["b_dec32"] = torch.from_numpy(np.asarray(t["b_dec"], np.float32))
            t["W_skip32"] = None if t["W_skip"] is None else torch.from_numpy(np.asarray(t["W_skip"], np.float32))


def layer_norm_frozen(x, weight, bias, eps):
    """LayerNorm whose scale is a constant for gradients (hook_scale detached); the centring stays."""
    xc = x - x.mean(-1, keepdim=True)
    scale = (xc.pow(2).mean(-1, keepdim=True) + eps).sqrt().detach()
    return xc / scale * weight + bias


def run(W, ids, hooks=None):
    """The frozen model on ids [batch, pos]. Returns (transcoder inputs per layer and ln_final's
    output, each [batch, pos, d_model]; the real MLP outputs; the embedding; the MLP-output tensors
    the gradients are read at; logits of the last position [batch, d_vocab])."""
    w, c = W.w, W.c
    B, P = ids.shape
    H, D = W.n_head, W.d_model
    dh = D // H
    embed = w["wte.weight"][ids]                                          # [batch, pos, d_model]
    embed.requires_grad_(True)                                            # hook_embed's enable_gradient
    resid = embed + w["wpe.weight"][:P]
    causal = torch.ones(P, P, dtype=torch.bool).tril()                    # [query_pos, key_pos]
    inputs, mlp_outs, outs = [], [], []
    for l in range(W.n_layer):
        p = f"h.{l}."
        x = layer_norm_frozen(resid, w[p + "ln_1.weight"], w[p + "ln_1.bias"], W.eps)
        heads = lambda t: t.reshape(B, P, H, dh).transpose(1, 2)  # noqa: E731  [batch, head, pos, d_head]
        with torch.no_grad():  # the pattern is detached, so q and k carry no gradient
            q = heads(x @ w[p + "attn.c_attn.weight"][:, :D] + w[p + "attn.c_attn.bias"][:D])
            k = heads(x @ w[p + "attn.c_attn.weight"][:, D:2 * D] + w[p + "attn.c_attn.bias"][D:2 * D])
            scores = q @ k.transpose(-1, -2)
            if c.scale_attn_weights:
                scores = scores / dh ** 0.5
            if c.scale_attn_by_inverse_layer_idx:
                scores = scores / float(l + 1)
            pattern = torch.softmax(scores.masked_fill(~causal, float("-inf")), -1)  # [batch, head, query_pos, key_pos]
        # Only the values reach the backward pass, as TransformerLens computes them with W_V alone; one
        # fused c_attn product would push every gradient through W_Q and W_K as well.
        v = heads(x @ w[p + "attn.c_attn.weight"][:, 2 * D:] + w[p + "attn.c_attn.bias"][2 * D:])
        z = (pattern @ v).transpose(1, 2).reshape(B, P, D)
        resid = resid + z @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        x = layer_norm_frozen(resid, w[p + "ln_2.weight"], w[p + "ln_2.bias"], W.eps)  # the transcoder's input
        with torch.no_grad():
            mlp_out = W.act(x @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]) @ w[p + "mlp.c_proj.weight"] \
                + w[p + "mlp.c_proj.bias"]
        t = W.tcs[l]
        skip = x @ t["W_skip32"].T if t["W_skip32"] is not None else x * 0
        out = skip + (mlp_out - skip).detach()
        if hooks is not None:
            out.register_hook(hooks[l])
        inputs.append(x), mlp_outs.append(mlp_out), outs.append(out)
        resid = resid + out
    final = layer_norm_frozen(resid, w["ln_f.weight"], w["ln_f.bias"], W.eps)
    inputs.append(final)
    logits = final[:, -1] @ w["lm_head.weight"].T
    return inputs, mlp_outs, embed, outs, logits


class Context:
    """setup_attribution plus AttributionContext: the nodes' vectors, the batch-expanded run kept
    for the backward passes, and the row buffer its hooks write."""

    def __init__(self, W, tokens, batch, read, max_n_logits=10, desired_logit_prob=0.95):
        self.W, self.batch, self.read = W, batch, read
        L, D = W.n_layer, W.d_model
        ids = torch.tensor(tokens, dtype=torch.long)[None]
        P = ids.shape[1]
        self.n_pos = P
        with torch.no_grad():
            inputs, mlp_outs, _, _, logits = run(W, ids)
        feats, enc, dec, err = [], [], [], []
        for l, t in enumerate(W.tcs):
            x = inputs[l][0]
            acts, _ = saeref.run(t["sae"], x.double().numpy())            # [pos, d_sae]
            acts[0] = 0                                                   # encode_sparse(zero_first_pos)
            pos, lat = np.nonzero(acts)                                   # row-major: the coalesced order
            a = torch.from_numpy(acts[pos, lat].astype(np.float32))
            lat_t = torch.from_numpy(lat)
            feats += [(l, int(p), int(f)) for p, f in zip(pos, lat)]
            enc.append(t["W_enc32"][lat_t])
            dec.append(t["W_dec32"][lat_t] * a[:, None])
            recon = torch.from_numpy(acts.astype(np.float32)) @ t["W_dec32"] + t["b_dec32"]
            if t["W_skip32"] is not None:
                recon = recon + x @ t["W_skip32"].T
            e = mlp_outs[l][0] - recon
            e[0] = 0
            err.append(e)
        self.features = np.array(feats, dtype=np.int64).reshape(-1, 3)
        self.n_feat = len(feats)
        self.feat_layer = torch.from_numpy(self.features[:, 0])
        self.feat_pos = torch.from_numpy(self.features[:, 1])
        self.encoder_vecs = torch.cat(enc)                                # [features, d_model]
        self.decoder_vecs = torch.cat(dec)                                # [features, d_model]
        self.error_vecs = torch.stack(err)                                # [layer, pos, d_model]
        self.token_vecs = W.w["wte.weight"][ids[0]]                       # [pos, d_model]
        # compute_salient_logits
        probs = torch.softmax(logits[0], -1)
        top_p, top_idx = torch.topk(probs, max_n_logits)
        cutoff = int(torch.searchsorted(torch.cumsum(top_p, 0), torch.tensor(desired_logit_prob))) + 1
        self.logit_probs, self.logit_tokens = top_p[:cutoff], top_idx[:cutoff]
        W_U = W.w["lm_head.weight"]                                        # [d_vocab, d_model]
        self.logit_vecs = W_U[self.logit_tokens] - W_U.mean(0, keepdim=True)
        self.row_size = self.n_feat + (L + 1) * P                         # features, errors, tokens
        # Each layer's features are one contiguous run of rows, sorted by position.
        self.layer_rows = [torch.nonzero(self.feat_layer == l).flatten() for l in range(L)]
        self.pos_runs = []
        for l in range(L):
            r = self.layer_rows[l]
            runs = []
            if len(r):
                ps = self.feat_pos[r]
                for p in torch.unique(ps).tolist():
                    m = torch.nonzero(ps == p).flatten()
                    runs.append((p, int(r[m[0]]), int(r[m[-1]]) + 1))
            self.pos_runs.append(runs)
        self.buffer = None
        hooks = [self._read_hook(l) for l in range(L)]
        expanded = ids.expand(batch, -1)
        self.resid, _, embed, self._outs, _ = run(W, expanded, hooks)     # kept for every backward pass
        embed.register_hook(self._token_hook)

    def _read_hook(self, l):
        rows = self.layer_rows[l]
        dec = self.decoder_vecs[rows] if len(rows) else None
        pos = self.feat_pos[rows]
        e0 = self.n_feat + l * self.n_pos

        def hook(grads):                                                  # [batch, pos, d_model]
            buf = self.buffer
            if dec is not None:
                if self.read == "gather":   # _compute_score_hook: gather at the features' positions, then einsum
                    buf[rows[0]:rows[-1] + 1] += torch.einsum("bnd,nd->nb", grads[:, pos], dec)
                else:
                    for p, s, e in self.pos_runs[l]:
                        buf[s:e] += self.decoder_vecs[s:e] @ grads[:, p].T
            buf[e0:e0 + self.n_pos] += torch.einsum("bpd,pd->pb", grads, self.error_vecs[l])
        return hook

    def _token_hook(self, grads):
        t0 = self.n_feat + self.W.n_layer * self.n_pos
        self.buffer[t0:t0 + self.n_pos] += torch.einsum("bpd,pd->pb", grads, self.token_vecs)

    def compute_batch(self, layers, positions, values):
        """Rows [targets, row_size] of one backward pass; `layers` n_layer means ln_final's output."""
        self.buffer = torch.zeros(self.row_size, self.batch, dtype=F32)
        rows = torch.arange(len(layers))
        handles = []
        for layer in layers.unique().tolist():
            m = layers == layer

            def inject(grads, r=rows[m], p=positions[m], v=values[m]):
                g = grads.clone()
                g[r, p] = v
                return g
            handles.append(self.resid[layer].register_hook(inject))
        top = int(layers.max())
        try:
            self.resid[top].backward(torch.zeros_like(self.resid[top]), retain_graph=True)
        finally:
            for h in handles:
                h.remove()
        buf, self.buffer = self.buffer, None
        return buf.T[:len(layers)]


def partial_influences(edge_matrix, logit_probs, row_to_node, max_iter=128):
    """compute_partial_influences (graph.py): influence on the logits through the rows known so far."""
    a = edge_matrix.abs()
    a /= a.sum(1, keepdim=True).clamp(min=1e-8)
    influence = torch.zeros(edge_matrix.shape[1])
    prod = torch.zeros(edge_matrix.shape[1])
    prod[-len(logit_probs):] = logit_probs
    for _ in range(max_iter):
        prod = prod[row_to_node] @ a
        if not prod.any():
            return influence
        influence += prod
    raise RuntimeError("partial influences did not converge")


def attribute(ctx, max_feature_nodes, update_interval=4):
    """Phases 3 and 4 of _run_attribution, timed after one warm-up batch. Returns (adjacency
    [nodes, nodes] float32 numpy, selected feature indices, rows, ms, of which ms choosing rows)."""
    B, L, P = ctx.batch, ctx.W.n_layer, ctx.n_pos
    F, K = ctx.n_feat, len(ctx.logit_tokens)
    logit_offset = F + (L + 1) * P
    total = logit_offset + K
    n_rows = min(max_feature_nodes or F, F)
    warm = torch.arange(min(B, F)) if F else torch.zeros(0, dtype=torch.long)
    if len(warm):
        ctx.compute_batch(ctx.feat_layer[warm], ctx.feat_pos[warm], ctx.encoder_vecs[warm])

    start = time.perf_counter()
    edge = torch.zeros(n_rows + K, total)
    row_to_node = torch.zeros(n_rows + K, dtype=torch.long)
    for i in range(0, K, B):
        v = ctx.logit_vecs[i:i + B]
        edge[i:i + len(v), :logit_offset] = ctx.compute_batch(torch.full((len(v),), L), torch.full((len(v),), P - 1), v)
        row_to_node[i:i + len(v)] = torch.arange(i, i + len(v)) + logit_offset
    st, visited, n_visited, choosing = K, torch.zeros(F, dtype=torch.bool), 0, 0.0
    while n_visited < n_rows:
        if n_rows == F:
            pending = torch.arange(F)
        else:
            t0 = time.perf_counter()
            infl = partial_influences(edge[:st], ctx.logit_probs, row_to_node[:st])
            rank = torch.argsort(infl[:F], descending=True)
            pending = rank[~visited[rank]][:min(update_interval * B, n_rows - n_visited)]
            choosing += time.perf_counter() - t0
        for j in range(0, len(pending), B):
            idx = pending[j:j + B]
            n_visited += len(idx)
            edge[st:st + len(idx), :logit_offset] = ctx.compute_batch(ctx.feat_layer[idx], ctx.feat_pos[idx],
                                                                      ctx.encoder_vecs[idx])
            row_to_node[st:st + len(idx)] = idx
            visited[idx] = True
            st += len(idx)
    ms = (time.perf_counter() - start) * 1e3

    selected = torch.nonzero(visited).flatten()
    if n_rows < F:
        edge = edge[:, torch.cat([selected, torch.arange(F, total)])]
    edge = edge[row_to_node.argsort()]
    n = edge.shape[1]
    adjacency = torch.zeros(n, n)
    adjacency[:n_rows] = edge[:n_rows]
    adjacency[n - K:] = edge[n_rows:]
    return adjacency.numpy(), selected.numpy(), n_rows + K, ms, choosing * 1e3


def check(raw_path, ctx, adjacency, selected, tol=1e-4):
    raw = np.load(raw_path)
    ok = True
    feats = ctx.features[selected]
    if not np.array_equal(raw["features"].astype(np.int64), feats):
        print(f"check: the feature nodes differ ({len(raw['features'])} in {raw_path}, {len(feats)} here)")
        ok = False
    if not np.array_equal(raw["logit_tokens"], ctx.logit_tokens.numpy()):
        print(f"check: the logit nodes differ ({raw['logit_tokens'].tolist()} against {ctx.logit_tokens.tolist()})")
        ok = False
    if not ok or raw["adjacency"].shape != adjacency.shape:
        print(f"check FAILED: shapes {raw['adjacency'].shape} and {adjacency.shape}")
        return False
    ref = raw["adjacency"].astype(np.float64)
    scale = np.abs(ref).max(1)
    dev = np.abs(adjacency - ref).max(1)
    rel = np.where(scale > 0, dev / np.where(scale > 0, scale, 1), dev)
    worst = int(rel.argmax())
    passed = bool((rel <= tol).all())
    print(f"check {'passed' if passed else 'FAILED'}: {ref.shape[0]} nodes, {int((scale > 0).sum())} rows with edges; "
          f"max deviation {rel[worst]:.2e} of the row's scale (row {worst}, tolerance {tol:g}); "
          f"max absolute {np.abs(adjacency - ref).max():.2e}")
    return passed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=BUILTIN)
    ap.add_argument("--transcoders", nargs="+")
    ap.add_argument("--tokens", help="comma-separated token ids")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64, help="targets per backward pass (circuit-tracer: 512)")
    ap.add_argument("--max-feature-nodes", type=int, default=7500, help="0: every feature (default as headscope-cli)")
    ap.add_argument("--read", choices=("grouped", "gather"), default="grouped")
    ap.add_argument("--check", metavar="RAW.npz")
    ap.add_argument("--show-config", action="store_true", help="print torch.__config__.show() and the BLAS loaded")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    if a.tokens:
        tokens = [int(t) for t in a.tokens.split(",")]
    elif a.check:
        tokens = np.load(a.check)["tokens"].tolist()
    else:
        ap.error("--tokens or --check RAW.npz")
    W = Weights(a.model, transcoder_dirs(a.transcoders, a.model))
    ctx = Context(W, tokens, a.batch, a.read)
    adjacency, selected, rows, ms, choosing_ms = attribute(ctx, 0 if a.check else a.max_feature_nodes)
    print(f"{len(tokens)} tokens, {ctx.n_feat} active features, {len(ctx.logit_tokens)} logits, "
          f"{adjacency.shape[0]} nodes (read {a.read})")
    print(f"torch graph rows: {rows} rows in {ms:.0f} ms ({torch.get_num_threads()} threads, batch {a.batch}); "
          f"of which {choosing_ms:.0f} ms choosing rows (partial influences)")
    if a.show_config:
        with open("/proc/self/maps") as f:
            libs = sorted({os.path.realpath(s.split()[-1]) for s in f if "blas" in s or "lapack" in s})
        print(torch.__config__.show().rstrip())
        print(f"BLAS loaded: {', '.join(libs) or 'none'}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')}; "
              f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}; torch threads {torch.get_num_threads()}")
    if a.check:
        return 0 if check(a.check, ctx, adjacency, selected) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
