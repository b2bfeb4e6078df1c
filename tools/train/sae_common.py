"""Shared pieces of train_saes.py: the model's hook points, SAELens encode/decode of the stored
files, and the SAELens v6 disk format.

Hook points (TransformerLens names on the unprocessed model, as SAELens v6 uses them):
  blocks.L.hook_resid_pre        the input of block L (= output of block L-1, or embeddings)
  blocks.L.ln2.hook_normalized   ln_2's output INCLUDING its weight and bias (the MLP's input)
  blocks.L.hook_mlp_out          the MLP's output including c_proj's bias
"""
import json
import os

import numpy as np
import torch

from gpt2 import gelu_new, load_safetensors, save_safetensors


def forward_hooks(model, idx, capture=(), replace=None):
    """Runs the model on idx [B, T]; returns (logits, {hook: activation}).
    capture: hook names to return; replace: {hook: fn(act, cache) -> new act}. A replacement of
    hook_mlp_out receives the cache so a transcoder can read ln2.hook_normalized."""
    replace = replace or {}
    cache = {}
    B, T = idx.shape
    h = model.wte(idx) + model.wpe(torch.arange(T, device=idx.device))[None]

    def hook(name, x):
        if name in replace:
            x = replace[name](x, cache)
        cache[name] = x
        return x

    for L, blk in enumerate(model.h):
        h = hook(f"blocks.{L}.hook_resid_pre", h)
        a, _ = blk.attn(blk.ln_1(h))
        h = h + a
        n = hook(f"blocks.{L}.ln2.hook_normalized", blk.ln_2(h))
        m = hook(f"blocks.{L}.hook_mlp_out", blk.mlp.c_proj(gelu_new(blk.mlp.c_fc(n))))
        h = h + m
    x = model.ln_f(h)
    logits = x @ model.wte.weight.t()
    return logits, {k: v for k, v in cache.items() if k in capture}


class StoredSAE:
    """A SAELens v6 folder (cfg.json + sae_weights.safetensors) evaluated with SAELens's own
    encode/decode (sae_lens/saes/topk_sae.py TopKSAE, transcoder.py JumpReLUTranscoder), weights
    upcast from the stored dtype to float32 (SAELens casts them to cfg['dtype'])."""

    def __init__(self, folder, dtype=torch.float32):
        with open(os.path.join(folder, "cfg.json")) as f:
            self.cfg = json.load(f)
        w = load_safetensors(os.path.join(folder, "sae_weights.safetensors"))
        self.w = {k: torch.from_numpy(np.asarray(v, dtype=np.float32)).to(dtype) for k, v in w.items()}
        self.arch = self.cfg["architecture"]
        self.hook_in = self.cfg["metadata"]["hook_name"]
        self.hook_out = self.cfg["metadata"].get("hook_name_out", self.hook_in)

    def encode(self, x):
        c, w = self.cfg, self.w
        assert c["normalize_activations"] == "none" and c["reshape_activations"] == "none"
        if self.arch == "topk":
            sae_in = x - w["b_dec"] * float(c["apply_b_dec_to_input"])
            pre = sae_in @ w["W_enc"] + w["b_enc"]
            if c.get("rescale_acts_by_decoder_norm", False):
                pre = pre * w["W_dec"].norm(dim=-1)
            v, i = torch.topk(pre, k=c["k"], dim=-1, sorted=False)
            return torch.zeros_like(pre).scatter_(-1, i, v.relu())
        if self.arch == "jumprelu_transcoder":
            pre = x @ w["W_enc"] + w["b_enc"]
            return pre.relu() * (pre > w["threshold"]).to(pre.dtype)
        raise ValueError("architecture %s not handled here" % self.arch)

    def decode(self, acts):
        c, w = self.cfg, self.w
        if self.arch == "topk" and c.get("rescale_acts_by_decoder_norm", False):
            acts = acts / w["W_dec"].norm(dim=-1)
        return acts @ w["W_dec"] + w["b_dec"]


def write_saelens(folder, cfg, tensors):
    """cfg: dict as SAELens's cfg.to_dict() writes it; tensors: {name: float32 numpy}, stored F16."""
    os.makedirs(folder, exist_ok=True)
    save_safetensors(os.path.join(folder, "sae_weights.safetensors"),
                     {k: np.asarray(v, dtype=np.float32).astype(np.float16) for k, v in tensors.items()},
                     {"format": "pt"})
    with open(os.path.join(folder, "cfg.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
