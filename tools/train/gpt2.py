"""A plain-PyTorch GPT-2 (the Hugging Face GPT2LMHeadModel computation) plus a tiny safetensors
reader/writer. Shared by train.py, export.py, head_scores.py and make_builtin_fixture.py.

Parameter names and layouts are Hugging Face's (without the `transformer.` prefix):
Conv1D weights are [in, out] and y = x @ W + b; lm_head is tied to wte.
"""
import json
import math
import struct

import numpy as np
import torch
import torch.nn as nn


class Config:
    def __init__(self, vocab_size=4096, n_positions=256, n_embd=256, n_layer=4, n_head=8,
                 n_inner=None, layer_norm_epsilon=1e-5, eos_token_id=None):
        self.vocab_size = vocab_size
        self.n_positions = n_positions
        self.n_embd = n_embd
        self.n_layer = n_layer
        self.n_head = n_head
        self.n_inner = n_inner if n_inner is not None else 4 * n_embd
        self.layer_norm_epsilon = layer_norm_epsilon
        self.eos_token_id = vocab_size - 1 if eos_token_id is None else eos_token_id

    def hf_dict(self):
        return {
            "model_type": "gpt2",
            "architectures": ["GPT2LMHeadModel"],
            "vocab_size": self.vocab_size,
            "n_positions": self.n_positions,
            "n_ctx": self.n_positions,
            "n_embd": self.n_embd,
            "n_layer": self.n_layer,
            "n_head": self.n_head,
            "n_inner": self.n_inner,
            "activation_function": "gelu_new",
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "resid_pdrop": 0.0,
            "embd_pdrop": 0.0,
            "attn_pdrop": 0.0,
            "initializer_range": 0.02,
            "scale_attn_weights": True,
            "tie_word_embeddings": True,
            "bos_token_id": self.eos_token_id,
            "eos_token_id": self.eos_token_id,
            "torch_dtype": "float16",
        }

    @staticmethod
    def from_hf(d):
        return Config(vocab_size=d["vocab_size"], n_positions=d["n_positions"], n_embd=d["n_embd"],
                      n_layer=d["n_layer"], n_head=d["n_head"], n_inner=d.get("n_inner"),
                      layer_norm_epsilon=d.get("layer_norm_epsilon", 1e-5),
                      eos_token_id=d.get("eos_token_id"))


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Conv1D(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg.n_head
        self.d_head = cfg.n_embd // cfg.n_head
        self.c_attn = Conv1D(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = Conv1D(cfg.n_embd, cfg.n_embd)

    def forward(self, x, want_pattern=False):
        B, T, D = x.shape
        q, k, v = self.c_attn(x).split(D, dim=2)
        q = q.view(B, T, self.n_head, self.d_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, self.d_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, self.d_head).transpose(1, 2)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.d_head)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        pattern = torch.softmax(scores, dim=-1)
        z = (pattern @ v).transpose(1, 2).reshape(B, T, D)
        out = self.c_proj(z)
        return (out, pattern) if want_pattern else (out, None)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = Conv1D(cfg.n_embd, cfg.n_inner)
        self.c_proj = Conv1D(cfg.n_inner, cfg.n_embd)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.mlp = MLP(cfg)

    def forward(self, x, want_pattern=False):
        a, pat = self.attn(self.ln_1(x), want_pattern)
        x = x + a
        x = x + self.mlp(self.ln_2(x))
        return x, pat


class GPT2(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)

    def init_weights(self, pos_scale=0.02):
        cfg = self.cfg
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                nn.init.zeros_(p)
            elif "ln_" in name:
                nn.init.ones_(p)
            elif name.endswith("c_proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.n_layer))
            else:
                nn.init.normal_(p, std=0.02)
        # sinusoidal initial position embeddings (still learned), rms pos_scale per element
        pos = torch.arange(cfg.n_positions, dtype=torch.float32)[:, None]
        i = torch.arange(0, cfg.n_embd, 2, dtype=torch.float32)[None, :]
        ang = pos / torch.pow(10000.0, i / cfg.n_embd)
        pe = torch.zeros(cfg.n_positions, cfg.n_embd)
        pe[:, 0::2] = torch.sin(ang)
        pe[:, 1::2] = torch.cos(ang)
        with torch.no_grad():
            self.wpe.weight.copy_(pe * (pos_scale * math.sqrt(2.0)))

    def forward(self, idx, want_patterns=False):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))[None]
        patterns = []
        for blk in self.h:
            x, pat = blk(x, want_patterns)
            patterns.append(pat)
        x = self.ln_f(x)
        logits = x @ self.wte.weight.t()
        return (logits, patterns) if want_patterns else logits


# ---------------------------------------------------------------- safetensors

_DT = {"F16": (np.float16, 2), "F32": (np.float32, 4), "I32": (np.int32, 4), "BF16": (None, 2),
       "F64": (np.float64, 8)}


def save_safetensors(path, tensors, metadata=None):
    """tensors: {name: numpy array (float16/float32/int32)}. Sorted by dtype then name, like the
    reference implementation; header padded with spaces to a multiple of 8."""
    code = {np.dtype(np.float16): "F16", np.dtype(np.float32): "F32", np.dtype(np.int32): "I32",
            np.dtype(np.float64): "F64"}
    items = sorted(tensors.items(), key=lambda kv: (-np.dtype(kv[1].dtype).itemsize, kv[0]))
    # order: by alignment (larger dtype first), then name, as the safetensors library does
    header = {}
    off = 0
    blobs = []
    for name, arr in items:
        arr = np.ascontiguousarray(arr)
        b = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": code[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    header["__metadata__"] = metadata or {"format": "pt"}
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack_from("<Q", raw, 0)[0]
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        dt = info["dtype"]
        buf = raw[base + a:base + b]
        if dt == "BF16":
            u = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            arr = u.view(np.float32)
        else:
            arr = np.frombuffer(buf, dtype=np.dtype(_DT[dt][0]).newbyteorder("<"))
        out[name] = arr.reshape(info["shape"])
    return out


def state_to_hf(model):
    """Model parameters as {hf_name: float32 numpy}, without lm_head (tied)."""
    return {k: v.detach().cpu().float().numpy() for k, v in model.state_dict().items()}


def load_model_dir(model_dir, dtype=torch.float64):
    """Loads config.json + model.safetensors (F16/F32/BF16) into a GPT2 in `dtype`."""
    import os
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = Config.from_hf(json.load(f))
    tensors = load_safetensors(os.path.join(model_dir, "model.safetensors"))
    tensors = {(k[len("transformer."):] if k.startswith("transformer.") else k): v
               for k, v in tensors.items() if not k.startswith("lm_head")}
    model = GPT2(cfg)
    sd = {k: torch.from_numpy(np.asarray(v, dtype=np.float64)).to(dtype) for k, v in tensors.items()}
    model.to(dtype)
    missing = model.load_state_dict(sd, strict=True)
    model.eval()
    return model, cfg
