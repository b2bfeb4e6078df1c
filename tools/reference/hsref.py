#!/usr/bin/python3
"""HeadScope's independent reference: safetensors I/O and float64 forward passes (GPT-2, Llama, Qwen2, Qwen3, Gemma 2, Gemma 3 text, GPT-NeoX).

This file is the yardstick the C++ engine is measured against, so it is written to be obviously
correct rather than fast: plain numpy for the file format, plain PyTorch in float64 for the model,
one function per layer kind, every activation of DESIGN.md's cache contract kept under its
TransformerLens name (no batch dimension).

Run it with the Debian interpreter (the one that has torch):

    /usr/bin/python3 tools/reference/hsref.py run --model DIR --tokens 1,2,3 [--ablate 3.2,1.0:mean] -o OUT.npz
    /usr/bin/python3 tools/reference/hsref.py patch --model DIR --clean 1,2,3 --corrupt 1,4,3 \
        --answer 5 --wrong 6 --what resid_pre|attn_out|mlp_out|z -o OUT.json
    /usr/bin/python3 tools/reference/hsref.py compare --reference A.npz --candidate B.npz [--rtol 1e-4]

`run` writes the cache as float32 arrays (masked attention scores as -inf) plus "tokens", to .npz
or to .safetensors (by the output's extension). `compare` reads either format and, for every key,
prints the largest absolute difference and the relative difference
    max|reference - candidate| / max|reference|      (per key, over finite reference entries)
i.e. relative to the key's largest magnitude (details in `compare_arrays`); masked -inf scores
must be -inf in both. It exits 1 when any key fails (or is missing), 2 on unreadable input.

    /usr/bin/python3 tools/reference/hsref.py lens --model DIR --tokens 1,2,3 -o OUT.npz
    /usr/bin/python3 tools/reference/hsref.py circuits --model DIR --head 1.3 [--tokens 1,2,3] [-o OUT.json]

`lens` writes "lens.logprobs" [n_layer + 1, pos, d_vocab] (the logit lens of every resid_pre and
the final resid_post) and "tokens"; `circuits` prints a head's QK / OV singular values, the full
OV circuit's eigenvalues and copying score (and, with --tokens, the token-to-token QK scores and
the tokens each prompt token's OV circuit promotes), all computed by materializing the matrices.

`patch` writes metric_clean, metric_corrupt, raw and normalized as JSON (TransformerLens's
conventions: one full run per patched cell; see patching_sweep; --what also z_pos, mlp_post).

    /usr/bin/python3 tools/reference/hsref.py grad --model DIR --tokens 1,2,3 --metric logit_diff \
        --answer-id 5 --wrong-id 6 [--pos P] [--hook KEY --vector V.npy [--head H]] -o OUT.npz
    /usr/bin/python3 tools/reference/hsref.py atp --model DIR --clean 1,2,3 --corrupt 1,4,3 --answer 5 \
        --wrong 6 --what resid_pre|attn_out|mlp_out|z|z_pos|mlp_post [--method atp|atp_qk] -o OUT.json
    /usr/bin/python3 tools/reference/hsref.py attribute --model DIR --tokens 1,2,3 \
        --method grad_x_input|integrated_gradients [--steps 32] --metric ... -o OUT.json

`grad` writes "metric" (float64 [1]), "tokens" (int32) and KEY.grad (float32, the key's shape)
for every key the metric depends on: float64 autograd through the forward pass (see grad()).
`atp` is attribution patching in patch's layout (atp(): AtP*'s QK fix documented there);
`attribute` writes tokens, attributions, metric, baseline_metric, completeness_error.

Importable: `read_safetensors`, `write_safetensors`, `load_gpt2`, `forward` (with hooks),
`load_llama`, `llama_forward` (Llama, Qwen2, Qwen3, Gemma 2, Gemma 3 text), `load_neox`, `neox_forward`, `load_any`, `forward_any`,
`ablation_hooks`, `edit_hooks`, `patching_sweep`, `compare_caches`, `logit_lens`, `circuits`, `copying_scores`,
`Metric`, `grad`, `atp`, `attribute`.
Self-tests: /usr/bin/python3 -m unittest discover -s tools/reference
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import struct
import sys
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

# ---------------------------------------------------------------------------------------------
# safetensors
# ---------------------------------------------------------------------------------------------
# Layout: u64 little-endian N | N bytes of JSON header (padded with spaces) | data block.
# Header: {"__metadata__": {str: str}?, name: {"dtype", "shape", "data_offsets": [begin, end]}}
# with offsets relative to the start of the data block.

_ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
             "U8": 1, "BOOL": 1}
_NUMPY_DTYPE = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
                "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}
_MAX_HEADER_BYTES = 100 * 1024 * 1024


class SafetensorsError(ValueError):
    """A safetensors file that cannot be read; the message names the file and the problem."""


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 is the top half of a float32: shifting the 16 bits up is exact."""
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round float32 to the nearest bfloat16, ties to even (what torch's .to(bfloat16) does)."""
    f32 = np.ascontiguousarray(values, dtype=np.float32)
    u = f32.view(np.uint32).astype(np.uint64)
    rounded = (u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    bits = rounded.astype(np.uint16)
    bits[np.isnan(f32)] = 0x7FC0  # keep NaN a NaN (the rounding add could carry it to inf)
    return bits


def read_safetensors_header(path: str) -> Tuple[dict, int]:
    """Returns (header dict, byte offset of the data block)."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise SafetensorsError(f"{path}: too short for a safetensors file (no 8-byte header length)")
        (n,) = struct.unpack("<Q", head)
        size = os.fstat(f.fileno()).st_size
        if n > _MAX_HEADER_BYTES or 8 + n > size:
            raise SafetensorsError(f"{path}: header length {n} does not fit the file ({size} bytes)")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: header is not valid UTF-8 JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    return header, 8 + n


def read_safetensors(path: str, with_dtypes: bool = False):
    """Reads every tensor of a safetensors file into numpy arrays.

    F32 -> float32, F16 -> float16 (exact), BF16 -> float32 (exact), F64 -> float64,
    integer types -> the matching numpy integers. Returns {name: array}, or with
    with_dtypes=True ({name: array}, {name: stored dtype string}, metadata dict).
    """
    header, data_start = read_safetensors_header(path)
    with open(path, "rb") as f:
        f.seek(data_start)
        data = bytearray(os.fstat(f.fileno()).st_size - data_start)  # writable: torch.from_numpy is happy
        f.readinto(data)
    metadata = header.pop("__metadata__", {}) or {}
    tensors: Dict[str, np.ndarray] = {}
    dtypes: Dict[str, str] = {}
    for name, info in header.items():
        try:
            dtype, shape, (begin, end) = info["dtype"], list(info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"{path}: tensor '{name}' has a malformed entry {info!r}") from None
        if dtype not in _ITEMSIZE:
            raise SafetensorsError(f"{path}: tensor '{name}' has unsupported dtype {dtype}")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not (0 <= begin <= end <= len(data)) or end - begin != count * _ITEMSIZE[dtype]:
            raise SafetensorsError(
                f"{path}: tensor '{name}' ({dtype} {shape}) has data_offsets [{begin}, {end}] "
                f"but needs {count * _ITEMSIZE[dtype]} bytes inside a {len(data)}-byte data block")
        buf = memoryview(data)[begin:end]
        if dtype == "BF16":
            arr = bf16_bits_to_f32(np.frombuffer(buf, dtype="<u2"))
        else:
            arr = np.frombuffer(buf, dtype=_NUMPY_DTYPE[dtype])
        tensors[name] = arr.reshape(shape)
        dtypes[name] = dtype
    if with_dtypes:
        return tensors, dtypes, metadata
    return tensors


def _encode_for_safetensors(name: str, arr: np.ndarray, dtype: str) -> bytes:
    if dtype == "F32":
        return np.ascontiguousarray(arr, dtype="<f4").tobytes()
    if dtype == "F16":
        return np.ascontiguousarray(arr, dtype="<f2").tobytes()
    if dtype == "F64":
        return np.ascontiguousarray(arr, dtype="<f8").tobytes()
    if dtype == "BF16":
        return f32_to_bf16_bits(np.asarray(arr, dtype=np.float32)).astype("<u2").tobytes()
    if dtype in ("I64", "I32"):
        a = np.asarray(arr)
        if a.dtype.kind == "f" and not np.all(np.isfinite(a) & (a == np.round(a))):
            raise ValueError(f"tensor '{name}': {dtype} requested for non-integer values")
        return np.ascontiguousarray(a, dtype=_NUMPY_DTYPE[dtype]).tobytes()
    raise ValueError(f"tensor '{name}': the writer supports F32, F16, BF16, F64, I32, I64, not {dtype}")


def write_safetensors(path: str, tensors: Mapping[str, np.ndarray],
                      dtypes: Union[str, Mapping[str, str], None] = None,
                      metadata: Optional[Mapping[str, str]] = None) -> None:
    """Writes tensors sorted by name (byte order). `dtypes` is one dtype for every floating tensor,
    or a {name: dtype} map; by default floating arrays are written as F32 and integer arrays as I64.
    Conversion rounds to nearest (ties to even) for F16 and BF16."""
    names = sorted(tensors, key=lambda s: s.encode("utf-8"))
    header: Dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs: List[bytes] = []
    offset = 0
    for name in names:
        arr = np.asarray(tensors[name])
        if isinstance(dtypes, Mapping) and name in dtypes:
            dtype = dtypes[name]
        elif arr.dtype.kind in "iu":
            dtype = "I64"
        elif isinstance(dtypes, str):
            dtype = dtypes
        else:
            dtype = "F32"
        blob = _encode_for_safetensors(name, arr, dtype)
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-len(text)) % 8)  # the data block starts 8-byte aligned
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)  # nothing half-written under the final name


# ---------------------------------------------------------------------------------------------
# GPT-2 config and weights
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class GPT2Config:
    n_layer: int
    n_head: int
    d_model: int
    d_mlp: int
    n_ctx: int
    d_vocab: int
    layer_norm_eps: float = 1e-5
    activation: str = "gelu_new"
    scale_attn_weights: bool = True
    scale_attn_by_inverse_layer_idx: bool = False

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_head

    @staticmethod
    def from_hf(cfg: Mapping) -> "GPT2Config":
        """Reads a Hugging Face GPT-2 config.json dict, with GPT2Config's defaults."""
        d_model = int(cfg.get("n_embd", 768))
        n_head = int(cfg.get("n_head", 12))
        if d_model % n_head:
            raise ValueError(f"config: n_embd {d_model} is not a multiple of n_head {n_head}")
        n_inner = cfg.get("n_inner")
        act = cfg.get("activation_function", "gelu_new")
        if act not in _ACTIVATIONS:
            raise ValueError(f"config: activation_function '{act}' is not one of {sorted(_ACTIVATIONS)}")
        return GPT2Config(
            n_layer=int(cfg.get("n_layer", 12)),
            n_head=n_head,
            d_model=d_model,
            d_mlp=int(n_inner) if n_inner is not None else 4 * d_model,
            n_ctx=int(cfg.get("n_positions", cfg.get("n_ctx", 1024))),
            d_vocab=int(cfg.get("vocab_size", 50257)),
            layer_norm_eps=float(cfg.get("layer_norm_epsilon", 1e-5)),
            activation=act,
            scale_attn_weights=bool(cfg.get("scale_attn_weights", True)),
            scale_attn_by_inverse_layer_idx=bool(cfg.get("scale_attn_by_inverse_layer_idx", False)),
        )


_BUFFER_RE = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")  # causal-mask buffers, not weights


def expected_shapes(c: GPT2Config) -> Dict[str, Tuple[int, ...]]:
    """Every weight GPT2LMHeadModel has, without the `transformer.` prefix (Conv1D is [in, out])."""
    shapes: Dict[str, Tuple[int, ...]] = {
        "wte.weight": (c.d_vocab, c.d_model),
        "wpe.weight": (c.n_ctx, c.d_model),
        "ln_f.weight": (c.d_model,), "ln_f.bias": (c.d_model,),
    }
    for i in range(c.n_layer):
        p = f"h.{i}."
        shapes.update({
            p + "ln_1.weight": (c.d_model,), p + "ln_1.bias": (c.d_model,),
            p + "attn.c_attn.weight": (c.d_model, 3 * c.d_model), p + "attn.c_attn.bias": (3 * c.d_model,),
            p + "attn.c_proj.weight": (c.d_model, c.d_model), p + "attn.c_proj.bias": (c.d_model,),
            p + "ln_2.weight": (c.d_model,), p + "ln_2.bias": (c.d_model,),
            p + "mlp.c_fc.weight": (c.d_model, c.d_mlp), p + "mlp.c_fc.bias": (c.d_mlp,),
            p + "mlp.c_proj.weight": (c.d_mlp, c.d_model), p + "mlp.c_proj.bias": (c.d_model,),
        })
    return shapes


@dataclasses.dataclass
class GPT2Model:
    config: GPT2Config
    weights: Dict[str, np.ndarray]  # canonical names (no prefix), exactly as stored; "lm_head.weight" always present
    dtypes: Dict[str, str]           # stored dtype of each tensor
    lm_head_tied: bool


def load_gpt2(model_dir: str) -> GPT2Model:
    """Loads config.json + model.safetensors of a Hugging Face GPT-2 folder, strictly: every
    expected tensor must be there with its shape, and nothing unknown may be."""
    cfg_path = os.path.join(model_dir, "config.json")
    st_path = os.path.join(model_dir, "model.safetensors")
    with open(cfg_path, encoding="utf-8") as f:
        config = GPT2Config.from_hf(json.load(f))
    raw, raw_dtypes, _ = read_safetensors(st_path, with_dtypes=True)
    weights: Dict[str, np.ndarray] = {}
    dtypes: Dict[str, str] = {}
    for name, arr in raw.items():
        canon = name[len("transformer."):] if name.startswith("transformer.") else name
        if _BUFFER_RE.match(canon):
            continue
        if canon in weights:
            raise ValueError(f"{st_path}: tensor '{canon}' appears both with and without 'transformer.'")
        weights[canon] = arr
        dtypes[canon] = raw_dtypes[name]
    shapes = expected_shapes(config)
    tied = "lm_head.weight" not in weights
    if not tied:
        shapes["lm_head.weight"] = (config.d_vocab, config.d_model)
    missing = sorted(set(shapes) - set(weights))
    unexpected = sorted(set(weights) - set(shapes))
    if missing or unexpected:
        raise ValueError(f"{st_path}: missing tensors {missing[:8]}, unexpected tensors {unexpected[:8]}")
    for name, shape in shapes.items():
        if tuple(weights[name].shape) != shape:
            raise ValueError(f"{st_path}: tensor '{name}' has shape {list(weights[name].shape)}, "
                             f"expected {list(shape)} from config.json")
    if tied:
        weights["lm_head.weight"] = weights["wte.weight"]
        dtypes["lm_head.weight"] = dtypes["wte.weight"]
    return GPT2Model(config, weights, dtypes, tied)


# ---------------------------------------------------------------------------------------------
# float64 forward pass (PyTorch)
# ---------------------------------------------------------------------------------------------

def _torch():
    import torch  # imported lazily: the safetensors and compare parts need only numpy
    return torch


def _gelu_tanh(x):
    torch = _torch()
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _gelu_fast(x):
    # transformers' FastGELUActivation: the truncated constant 0.7978845608, factored form
    torch = _torch()
    return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))


def _gelu_erf(x):
    torch = _torch()
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _relu(x):
    return _torch().relu(x)


def _silu(x):
    return x * _torch().sigmoid(x)


def _quick_gelu(x):
    return x * _torch().sigmoid(1.702 * x)


# Hugging Face's activation_function names (transformers/activations.py ACT2CLS) for GPT-2.
_ACTIVATIONS = {
    "gelu_new": _gelu_tanh, "gelu_pytorch_tanh": _gelu_tanh, "gelu_accurate": _gelu_tanh,
    "gelu_fast": _gelu_fast,
    "gelu": _gelu_erf, "gelu_python": _gelu_erf,
    "relu": _relu, "silu": _silu, "swish": _silu, "quick_gelu": _quick_gelu,
}


def layer_norm(x, weight, bias, eps: float):
    """x: [pos, d_model]. Biased variance, as torch.nn.LayerNorm."""
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / (var + eps).sqrt() * weight + bias


def torch_weights(model: GPT2Model, dtype=None) -> Dict[str, object]:
    """Every weight as a torch tensor of `dtype` (default float64), converted once: pass the result
    to forward(weights=...) when running the same model many times (a patching sweep)."""
    torch = _torch()
    dtype = dtype or torch.float64
    return {name: torch.from_numpy(np.asarray(w, dtype=np.float64)).to(dtype) for name, w in model.weights.items()}


# Hook points an intervention may edit, TransformerLens's names (DESIGN.md, "Interventions").
# The editable hook points (HeadScope's core/model/hooks.h marks the same ones editable).
HOOK_POINTS = ("hook_embed", "hook_pos_embed", "hook_resid_pre", "attn.hook_q", "attn.hook_k", "attn.hook_v",
               "attn.hook_pattern", "attn.hook_z", "hook_attn_out", "hook_resid_mid", "mlp.hook_pre",
               "mlp.hook_post", "hook_mlp_out", "hook_resid_post")


def forward(model: GPT2Model, tokens: Sequence[int], config: Optional[GPT2Config] = None,
            dtype=None, hooks: Optional[Mapping[str, Sequence]] = None, weights=None,
            attn_result: bool = True, tap=None):
    """Runs the model in float64 and returns {cache key: torch tensor} (DESIGN.md's activation
    cache contract, no batch dimension). `config` overrides model.config (used to show that a
    fixture detects a wrong setting); `dtype` (default torch.float64) is there to measure how far
    a float32 computation lands from the float64 one.

    `hooks` are TransformerLens-style forward hooks: {"blocks.{l}.hook_resid_pre" (or attn.hook_z,
    hook_attn_out, hook_mlp_out): [fn, ...]}, each fn(activation) -> the activation the model goes
    on with, applied in order where the hook sits; the cache records the edited value, as a
    caching hook added after the editing ones does in TransformerLens. `weights`: a
    torch_weights(model, dtype) dict, so repeated runs skip the conversion. `attn_result=False`
    leaves out hook_result (TransformerLens computes it only with use_attn_result).

    `tap(key, value) -> value` (used by grad() and the finite-difference checks) is called at
    every cache key, after the editing hooks; what it returns is cached and used downstream, so
    every key is on the autograd path. With a tap, hook_attn_out is sum over heads of hook_result
    + b_O (TransformerLens's use_attn_result path) so that hook_result is on the path too."""
    torch = _torch()
    dtype = dtype or torch.float64
    c = config or model.config
    hooks = hooks or {}
    unknown = [k for k in hooks if not any(k == h or k.endswith("." + h) for h in HOOK_POINTS)]
    if unknown:
        raise ValueError(f"hooks {unknown} are not at one of {HOOK_POINTS}")

    def hooked(key, value):
        for fn in hooks.get(key, ()):
            value = fn(value)
        return value
    tokens = [int(t) for t in tokens]
    if not 1 <= len(tokens) <= c.n_ctx:
        raise ValueError(f"need 1..{c.n_ctx} tokens (n_positions), got {len(tokens)}")
    bad = [t for t in tokens if not 0 <= t < c.d_vocab]
    if bad:
        raise ValueError(f"token ids {bad[:5]} are outside the vocabulary [0, {c.d_vocab})")

    def W(name):
        if weights is not None:
            return weights[name]
        return torch.from_numpy(np.asarray(model.weights[name], dtype=np.float64)).to(dtype)

    n_pos, H, dh, D = len(tokens), c.n_head, c.d_head, c.d_model
    act = _ACTIVATIONS[c.activation]
    cache = {}
    keep = _keeper(cache, tap)
    ids = torch.tensor(tokens, dtype=torch.long)
    embed = keep("hook_embed", hooked("hook_embed", W("wte.weight")[ids]))               # [pos, d_model]
    pos_embed = keep("hook_pos_embed", hooked("hook_pos_embed", W("wpe.weight")[:n_pos]))  # [pos, d_model]
    resid = embed + pos_embed                                        # [pos, d_model]
    causal = torch.ones(n_pos, n_pos, dtype=torch.bool).tril()       # [query_pos, key_pos]

    for l in range(c.n_layer):
        p, k_ = f"h.{l}.", f"blocks.{l}."  # Hugging Face weight prefix, TransformerLens key prefix
        resid = keep(k_ + "hook_resid_pre", hooked(k_ + "hook_resid_pre", resid))
        x = layer_norm(resid, W(p + "ln_1.weight"), W(p + "ln_1.bias"), c.layer_norm_eps)
        qkv = x @ W(p + "attn.c_attn.weight") + W(p + "attn.c_attn.bias")   # [pos, 3*d_model]
        q, k, v = (t.reshape(n_pos, H, dh) for t in qkv.split(D, dim=-1))   # [pos, head, d_head]
        q = keep(k_ + "attn.hook_q", hooked(k_ + "attn.hook_q", q))
        k = keep(k_ + "attn.hook_k", hooked(k_ + "attn.hook_k", k))
        v = keep(k_ + "attn.hook_v", hooked(k_ + "attn.hook_v", v))
        scores = torch.einsum("qhd,khd->hqk", q, k)                          # [head, query_pos, key_pos]
        if c.scale_attn_weights:
            scores = scores / math.sqrt(dh)
        if c.scale_attn_by_inverse_layer_idx:
            scores = scores / float(l + 1)
        # attention is the only place positions mix; a query may read only itself and earlier keys
        scores = keep(k_ + "attn.hook_attn_scores", scores.masked_fill(~causal, float("-inf")))
        pattern = keep(k_ + "attn.hook_pattern",                             # [head, query_pos, key_pos]
                       hooked(k_ + "attn.hook_pattern", torch.softmax(scores, dim=-1)))
        z = torch.einsum("hqk,khd->qhd", pattern, v)                         # [pos, head, d_head]
        z = keep(k_ + "attn.hook_z", hooked(k_ + "attn.hook_z", z))
        w_o = W(p + "attn.c_proj.weight")                                    # [d_model(in), d_model]
        if attn_result or tap is not None:
            result = keep(k_ + "attn.hook_result", torch.einsum(             # [pos, head, d_model]
                "qhd,hdm->qhm", z, w_o.reshape(H, dh, D)))
        if tap is not None:
            attn_out = result.sum(dim=1) + W(p + "attn.c_proj.bias")
        else:
            # Hugging Face's way (concatenate heads, then project), independent of hook_result
            attn_out = z.reshape(n_pos, D) @ w_o + W(p + "attn.c_proj.bias")  # [pos, d_model]
        attn_out = keep(k_ + "hook_attn_out", hooked(k_ + "hook_attn_out", attn_out))
        resid = keep(k_ + "hook_resid_mid", hooked(k_ + "hook_resid_mid", resid + attn_out))
        x = layer_norm(resid, W(p + "ln_2.weight"), W(p + "ln_2.bias"), c.layer_norm_eps)
        pre = hooked(k_ + "mlp.hook_pre", x @ W(p + "mlp.c_fc.weight") + W(p + "mlp.c_fc.bias"))  # [pos, d_mlp]
        pre = keep(k_ + "mlp.hook_pre", pre)
        post = keep(k_ + "mlp.hook_post", hooked(k_ + "mlp.hook_post", act(pre)))  # [pos, d_mlp]
        mlp_out = post @ W(p + "mlp.c_proj.weight") + W(p + "mlp.c_proj.bias")  # [pos, d_model]
        mlp_out = keep(k_ + "hook_mlp_out", hooked(k_ + "hook_mlp_out", mlp_out))
        resid = keep(k_ + "hook_resid_post", hooked(k_ + "hook_resid_post", resid + mlp_out))

    final = keep("ln_final.hook_normalized",                                # [pos, d_model]
                 layer_norm(resid, W("ln_f.weight"), W("ln_f.bias"), c.layer_norm_eps))
    keep("logits", final @ W("lm_head.weight").T)                           # [pos, d_vocab]
    return cache


def _keeper(cache, tap):
    """keep(key, value): passes the value through `tap` (when given), stores it under `key` and
    returns it, so that what is cached is what the model goes on with."""
    def keep(key, value):
        if tap is not None:
            value = tap(key, value)
        cache[key] = value
        return value
    return keep


# ---------------------------------------------------------------------------------------------
# Llama family (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma2ForCausalLM,
# Gemma3ForCausalLM): config, weights, float64 forward pass
# ---------------------------------------------------------------------------------------------
# The math of Hugging Face's modeling_llama.py / modeling_qwen2.py, written with plain torch ops:
# RMSNorm (x * rsqrt(mean(x^2) + eps) * weight), rotary embeddings in the rotate-half layout
# (q * cos + rotate_half(q) * sin, cos = cat(freqs, freqs)), grouped-query attention (repeat_kv:
# query head h reads key/value head h // (n_head / n_kv)), and the SwiGLU MLP
# down(act(gate(x)) * up(x)). Linear weights are nn.Linear's [out, in]: y = x @ W.T + b.
#
# What the other three add, each a LlamaConfig field whose default is Llama's behaviour:
# - Qwen3 (modeling_qwen3.py Qwen3Attention.forward): q_norm / k_norm, a plain RMSNorm (weight w)
#   over each head's d_head, applied to the projections before the rotation; no q/k/v bias by
#   default; head_dim explicit.
# - Gemma 2 (modeling_gemma2.py): the embedding row times sqrt(hidden_size) (Gemma2Model.forward's
#   normalizer); Gemma2RMSNorm multiplies by (1 + w); the block is
#   h = x + post_attention_layernorm(attn(input_layernorm(x))),
#   out = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)));
#   scores * query_pre_attn_scalar^-0.5, then cap * tanh(scores / cap) (attn_logit_softcapping),
#   THEN the mask (eager_attention_forward); the logits soft-capped the same way
#   (Gemma2ForCausalLM.forward, final_logit_softcapping); even layers slide.
# - Gemma 3 text (modeling_gemma3.py): Gemma 2 plus q_norm / k_norm with (1 + w) before the
#   rotation; Gemma3Attention.forward passes no softcap to the attention function, so
#   attn_logit_softcapping is read but not applied; sliding layers rotate with
#   rope_local_base_freq and no rope_scaling, full layers with rope_theta and rope_scaling
#   (configuration_gemma3.py convert_rope_params_to_dict: the scaling goes to "full_attention").
# A sliding layer with window W lets query q read keys k with q - W < k <= q (W keys):
# masking_utils.py sliding_window_overlay (kv_idx > q_idx - sliding_window), as Gemma2DecoderLayer's
# older tril(ones, diagonal=-sliding_window) mask.

LLAMA_FAMILIES = ("llama", "qwen2", "qwen3", "gemma2", "gemma3_text")


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    family: str            # one of LLAMA_FAMILIES (config.json's model_type)
    n_layer: int
    n_head: int
    n_kv: int
    d_model: int
    d_head: int
    d_mlp: int
    n_ctx: int
    d_vocab: int
    rms_norm_eps: float = 1e-6
    activation: str = "silu"
    rope_theta: float = 10000.0
    rope_scaling: Optional[Tuple[Tuple[str, object], ...]] = None  # config.json's object, as sorted items
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    embed_scale: bool = False         # Gemma: the embedding row times sqrt(d_model)
    norm_plus_one: bool = False       # Gemma: every RMSNorm (q/k norms too) multiplies by 1 + w
    post_norms: bool = False          # Gemma: post_attention_layernorm, pre/post_feedforward_layernorm
    qk_norm: bool = False             # Qwen3, Gemma 3: q_norm / k_norm over d_head before the rotation
    attn_scale: Optional[float] = None    # None: 1/sqrt(d_head); Gemma: query_pre_attn_scalar^-0.5
    attn_softcap: Optional[float] = None  # Gemma 2: cap * tanh(scores / cap) before the mask
    final_softcap: Optional[float] = None  # Gemma 2/3: cap * tanh(logits / cap)
    windows: Tuple[int, ...] = ()     # per layer: 0 = global, W = sliding window of W keys; () = all global
    local_rope_theta: Optional[float] = None  # Gemma 3: sliding layers' base, without rope_scaling
    # Deliberate mistakes, only for showing that a fixture catches them (make_fixtures.py).
    rope_pairs: str = "half"        # "interleaved": pairs (2i, 2i+1) as llama2.c, not (i, i + d/2)
    kv_of_head: str = "repeat"      # "tile": head h reads kv h % n_kv instead of h // (n_head/n_kv)
    softcap_order: str = "before_mask"    # "after_mask": the cap applied to the masked scores
    qk_norm_order: str = "before_rotary"  # "after_rotary": q/k norms applied to the rotated q, k

    def window(self, layer: int) -> int:
        """Layer `layer`'s sliding window in keys (0: global)."""
        return self.windows[layer] if self.windows else 0

    def layer_rope(self, layer: int) -> Tuple[float, Optional[Mapping]]:
        """(theta, rope_scaling) that layer `layer` rotates with."""
        if self.local_rope_theta is not None and self.window(layer) > 0:
            return self.local_rope_theta, None
        return self.rope_theta, dict(self.rope_scaling) if self.rope_scaling else None

    @staticmethod
    def from_hf(cfg: Mapping) -> "LlamaConfig":
        family = cfg.get("model_type")
        if family not in LLAMA_FAMILIES:
            raise ValueError(f"config: model_type '{family}' is not one of {', '.join(LLAMA_FAMILIES)}")
        gemma = family in ("gemma2", "gemma3_text")
        d_model = int(cfg["hidden_size"])
        n_head = int(cfg["num_attention_heads"])
        n_layer = int(cfg["num_hidden_layers"])
        # configuration_{gemma2,gemma3,qwen3}.py default head_dim 256 / 256 / 128; Llama and Qwen2 derive it
        default_head_dim = {"gemma2": 256, "gemma3_text": 256, "qwen3": 128}.get(family, d_model // n_head)
        d_head = int(cfg.get("head_dim") or default_head_dim)
        # Gemma's configs name the MLP activation hidden_activation (Gemma2MLP reads config.hidden_activation)
        act = (cfg.get("hidden_activation") or cfg.get("hidden_act") or "gelu_pytorch_tanh") if gemma \
            else cfg.get("hidden_act", "silu")
        if act not in _ACTIVATIONS:
            raise ValueError(f"config: activation '{act}' is not one of {sorted(_ACTIVATIONS)}")
        theta = float(cfg.get("rope_theta", 1000000.0 if family == "gemma3_text" else 10000.0))
        local_theta = float(cfg.get("rope_local_base_freq", 10000.0))
        scaling = cfg.get("rope_scaling")
        params = cfg.get("rope_parameters")  # transformers 5's form: one dict, or one per layer type (Gemma 3)
        if params is not None:
            if family == "gemma3_text" and "full_attention" in params:
                local = params.get("sliding_attention") or {}
                if local.get("rope_type", "default") != "default":
                    raise ValueError("config: scaled rotary on Gemma 3's sliding layers is not implemented here")
                local_theta = float(local.get("rope_theta", local_theta))
                params = params["full_attention"] or {}
            theta = float(params.get("rope_theta", theta))
            scaling = params if params.get("rope_type", "default") != "default" else scaling
        if scaling is not None:
            kind = scaling.get("rope_type", scaling.get("type"))
            if kind not in ("linear", "llama3", "default"):
                raise ValueError(f"config: rope_scaling type '{kind}' is not implemented here")
            scaling = tuple(sorted(scaling.items()))
        attention_bias = bool(cfg.get("attention_bias", False))
        extra: Dict[str, object] = {}
        if gemma:
            extra.update(embed_scale=True, norm_plus_one=True, post_norms=True, qk_norm=family == "gemma3_text",
                         attn_scale=float(cfg.get("query_pre_attn_scalar", 256)) ** -0.5)
            softcap_defaults = (50.0, 30.0) if family == "gemma2" else (None, None)  # configuration_gemma{2,3}.py
            attn_cap = cfg.get("attn_logit_softcapping", softcap_defaults[0])
            final_cap = cfg.get("final_logit_softcapping", softcap_defaults[1])
            if family == "gemma2" and attn_cap is not None:
                extra["attn_softcap"] = float(attn_cap)
            if final_cap is not None:
                extra["final_softcap"] = float(final_cap)
            if family == "gemma3_text":
                extra["local_rope_theta"] = local_theta
        if family == "qwen3":
            extra["qk_norm"] = True
        extra["windows"] = _layer_windows(cfg, family, n_layer)
        return LlamaConfig(
            family=family, n_layer=n_layer, n_head=n_head,
            n_kv=int(cfg.get("num_key_value_heads") or n_head), d_model=d_model, d_head=d_head,
            d_mlp=int(cfg["intermediate_size"]), n_ctx=int(cfg["max_position_embeddings"]),
            d_vocab=int(cfg["vocab_size"]), rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            activation=act,
            rope_theta=theta, rope_scaling=scaling,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", gemma)),
            qkv_bias=True if family == "qwen2" else attention_bias,
            o_bias=False if family == "qwen2" else attention_bias,
            mlp_bias=bool(cfg.get("mlp_bias", False)) if family == "llama" else False,
            **extra)


def _layer_windows(cfg: Mapping, family: str, n_layer: int) -> Tuple[int, ...]:
    """Each layer's sliding window (0: global), by Hugging Face's rules: config.json's layer_types
    when present ("sliding_attention" / "full_attention"), otherwise
      gemma2       layer i slides when i is even (Gemma2Attention: `not bool(layer_idx % 2)`;
                   configuration_gemma2.py: bool((i + 1) % 2))
      gemma3_text  layer i slides when (i + 1) % sliding_window_pattern != 0 (default 6)
      qwen2/qwen3  layer i slides when use_sliding_window and i >= max_window_layers (default 28)
                   (configuration_qwen2.py / _qwen3.py: sliding_window is None unless
                   use_sliding_window, then "sliding_attention" if i >= max_window_layers)
      llama        no window.
    () when no layer slides."""
    if family == "llama":
        return ()
    if family in ("qwen2", "qwen3"):
        window = cfg.get("sliding_window", 4096) if cfg.get("use_sliding_window", False) else None
    else:
        window = cfg.get("sliding_window", 4096)
    types = cfg.get("layer_types")
    if types is not None:
        if len(types) != n_layer or any(t not in ("sliding_attention", "full_attention") for t in types):
            raise ValueError(f"config: layer_types {types} is not {n_layer} of sliding_attention / full_attention")
        sliding = [t == "sliding_attention" for t in types]
    elif family == "gemma2":
        sliding = [i % 2 == 0 for i in range(n_layer)]
    elif family == "gemma3_text":
        pattern = int(cfg.get("sliding_window_pattern", 6))
        sliding = [bool((i + 1) % pattern) for i in range(n_layer)]
    else:
        max_window_layers = int(cfg.get("max_window_layers", 28))
        sliding = [i >= max_window_layers for i in range(n_layer)]
    if window is None or not any(sliding):
        return ()
    if int(window) < 1:
        raise ValueError(f"config: sliding_window {window} must be at least 1")
    return tuple(int(window) if s else 0 for s in sliding)


def allowed_keys(n_pos: int, window: int):
    """[query_pos, key_pos] bool: the keys a query may read: k <= q, and with a window W > 0 also
    k > q - W (the W most recent keys, itself included)."""
    torch = _torch()
    q = torch.arange(n_pos)[:, None]
    k = torch.arange(n_pos)[None, :]
    allowed = k <= q
    if window > 0:
        allowed = allowed & (k > q - window)
    return allowed


def softcap(x, cap: float):
    """Gemma's soft-cap: cap * tanh(x / cap) (divide, tanh, multiply, as eager_attention_forward)."""
    return _torch().tanh(x / cap) * cap


def llama_expected_shapes(c: LlamaConfig) -> Dict[str, Tuple[int, ...]]:
    """Every weight of the checkpoint, without the `model.` prefix, nn.Linear [out, in]."""
    D, M, q, kv = c.d_model, c.d_mlp, c.n_head * c.d_head, c.n_kv * c.d_head
    shapes: Dict[str, Tuple[int, ...]] = {"embed_tokens.weight": (c.d_vocab, D), "norm.weight": (D,)}
    for i in range(c.n_layer):
        p = f"layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
            p + "self_attn.q_proj.weight": (q, D), p + "self_attn.k_proj.weight": (kv, D),
            p + "self_attn.v_proj.weight": (kv, D), p + "self_attn.o_proj.weight": (D, q),
            p + "mlp.gate_proj.weight": (M, D), p + "mlp.up_proj.weight": (M, D),
            p + "mlp.down_proj.weight": (D, M),
        })
        if c.post_norms:  # Gemma: post_attention_layernorm is the post-attention norm here
            shapes.update({p + "pre_feedforward_layernorm.weight": (D,), p + "post_feedforward_layernorm.weight": (D,)})
        if c.qk_norm:
            shapes.update({p + "self_attn.q_norm.weight": (c.d_head,), p + "self_attn.k_norm.weight": (c.d_head,)})
        if c.qkv_bias:
            shapes.update({p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,),
                           p + "self_attn.v_proj.bias": (kv,)})
        if c.o_bias:
            shapes[p + "self_attn.o_proj.bias"] = (D,)
        if c.mlp_bias:
            shapes.update({p + "mlp.gate_proj.bias": (M,), p + "mlp.up_proj.bias": (M,),
                           p + "mlp.down_proj.bias": (D,)})
    if not c.tie_word_embeddings:
        shapes["lm_head.weight"] = (c.d_vocab, D)
    return shapes


@dataclasses.dataclass
class LlamaModel:
    config: LlamaConfig
    weights: Dict[str, np.ndarray]  # names without "model."; "lm_head.weight" always present
    dtypes: Dict[str, str]


def read_checkpoint(model_dir: str) -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    """model.safetensors, or the shards model.safetensors.index.json lists, merged."""
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        raw, dtypes, _ = read_safetensors(single, with_dtypes=True)
        return raw, dtypes
    with open(os.path.join(model_dir, "model.safetensors.index.json"), encoding="utf-8") as f:
        weight_map = json.load(f)["weight_map"]
    raw, dtypes = {}, {}
    for shard in sorted(set(weight_map.values())):
        t, d, _ = read_safetensors(os.path.join(model_dir, shard), with_dtypes=True)
        for name in t:
            if weight_map.get(name) != shard:
                raise ValueError(f"{shard}: tensor '{name}' is not listed for this shard in the index")
        raw.update(t)
        dtypes.update(d)
    missing = sorted(set(weight_map) - set(raw))
    if missing:
        raise ValueError(f"the index lists tensors no shard holds: {missing[:5]}")
    return raw, dtypes


def load_llama(model_dir: str) -> LlamaModel:
    """A Hugging Face Llama, Qwen2, Qwen3, Gemma 2 or Gemma 3 (text) folder, strictly: every tensor present with its shape."""
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        c = LlamaConfig.from_hf(json.load(f))
    raw, raw_dtypes = read_checkpoint(model_dir)
    weights, dtypes = {}, {}
    for name, arr in raw.items():
        canon = name[len("model."):] if name.startswith("model.") else name
        if canon.endswith(".rotary_emb.inv_freq"):
            continue
        weights[canon] = arr
        dtypes[canon] = raw_dtypes[name]
    shapes = llama_expected_shapes(c)
    missing, unexpected = sorted(set(shapes) - set(weights)), sorted(set(weights) - set(shapes))
    if missing or unexpected:
        raise ValueError(f"{model_dir}: missing tensors {missing[:8]}, unexpected tensors {unexpected[:8]}")
    for name, shape in shapes.items():
        if tuple(weights[name].shape) != shape:
            raise ValueError(f"{model_dir}: tensor '{name}' has shape {list(weights[name].shape)}, expected {list(shape)}")
    if c.tie_word_embeddings:
        weights["lm_head.weight"] = weights["embed_tokens.weight"]
        dtypes["lm_head.weight"] = dtypes["embed_tokens.weight"]
    return LlamaModel(c, weights, dtypes)


def rope_inv_freq(dim: int, theta: float, scaling: Optional[Mapping]):
    """transformers' ROPE_INIT_FUNCTIONS for "default", "linear" and "llama3", in float64."""
    torch = _torch()
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    if not scaling:
        return inv_freq
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "default":
        return inv_freq
    if kind == "linear":
        return inv_freq / scaling["factor"]
    # _compute_llama3_parameters
    factor = scaling["factor"]
    low_freq_factor = scaling["low_freq_factor"]
    high_freq_factor = scaling["high_freq_factor"]
    old_context_len = scaling["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def apply_rotary(x, inv_freq, pairs: str = "half"):
    """x: [pos, head, d_head]; rotates the first 2 * len(inv_freq) dimensions of each head by
    position * inv_freq, the rest passes (partial rotary). "half" is transformers' rotate_half
    layout; "interleaved" pairs (2i, 2i+1), as Meta's original code and llama2.c do."""
    torch = _torch()
    rot = 2 * inv_freq.shape[0]
    pos = torch.arange(x.shape[0], dtype=torch.float64)
    freqs = torch.outer(pos, inv_freq)                                  # [pos, rot/2]
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    if pairs == "half":
        emb = torch.cat((freqs, freqs), dim=-1)                         # [pos, rot]
        cos, sin = emb.cos()[:, None, :].to(x.dtype), emb.sin()[:, None, :].to(x.dtype)
        x1, x2 = x_rot[..., :rot // 2], x_rot[..., rot // 2:]
        rotated = x_rot * cos + torch.cat((-x2, x1), dim=-1) * sin
    else:
        cos, sin = freqs.cos()[:, None, :].to(x.dtype), freqs.sin()[:, None, :].to(x.dtype)
        even, odd = x_rot[..., 0::2], x_rot[..., 1::2]
        rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
    return torch.cat((rotated, x_pass), dim=-1)


def rms_norm(x, weight, eps: float):
    """x: [pos, d_model] -> (normalized * weight, scale [pos, 1]); scale = sqrt(mean(x^2) + eps)."""
    scale = (x.pow(2).mean(dim=-1, keepdim=True) + eps).sqrt()
    return x / scale * weight, scale


def llama_cache_keys(c: LlamaConfig) -> List[str]:
    """Every key llama_forward caches, in forward order."""
    keys = ["hook_embed"]
    qk = ("attn.q_norm.hook_scale", "attn.q_norm.hook_normalized", "attn.k_norm.hook_scale",
          "attn.k_norm.hook_normalized") if c.qk_norm else ()
    post_attn = ("ln1_post.hook_scale", "ln1_post.hook_normalized") if c.post_norms else ()
    post_mlp = ("ln2_post.hook_scale", "ln2_post.hook_normalized") if c.post_norms else ()
    for l in range(c.n_layer):
        b = f"blocks.{l}."
        keys += [b + k for k in (
            "hook_resid_pre", "ln1.hook_scale", "ln1.hook_normalized", "attn.hook_q", "attn.hook_k",
            "attn.hook_v") + qk + ("attn.hook_rot_q", "attn.hook_rot_k", "attn.hook_attn_scores",
            "attn.hook_pattern", "attn.hook_z", "attn.hook_result") + post_attn + ("hook_attn_out", "hook_resid_mid",
            "ln2.hook_scale", "ln2.hook_normalized", "mlp.hook_pre", "mlp.hook_pre_linear",
            "mlp.hook_post") + post_mlp + ("hook_mlp_out", "hook_resid_post")]
    return keys + ["ln_final.hook_scale", "ln_final.hook_normalized", "logits"]


def llama_forward(model: LlamaModel, tokens: Sequence[int], config: Optional[LlamaConfig] = None,
                  dtype=None, hooks: Optional[Mapping[str, Sequence]] = None, weights=None, tap=None):
    """The Llama-family forward pass in float64: {cache key: tensor}, keys as llama_cache_keys.
    `config` overrides model.config (a fixture's deliberate mistakes); `hooks` and `tap` as
    forward() (with a tap, hook_attn_out = sum over heads of hook_result + b_O, then the
    post-attention norm where the model has one, and each RMSNorm's hook_scale feeds its
    hook_normalized = x / scale * w).

    Qwen3 and Gemma extras (see the section comment): hook_embed is the scaled embedding row;
    attn.hook_q / hook_k are the projections, attn.q_norm.* / k_norm.* the per-head norms
    ([pos, head, 1] scales, [pos, head, d_head] normalized), hook_rot_q / hook_rot_k what the
    scores read; hook_attn_scores is after the scale and the soft-cap, -inf where masked (above
    the diagonal and outside a sliding window); hook_result is z_h W_O[h] before the
    post-attention norm, ln1_post.hook_normalized = hook_attn_out after it, ln2_post likewise
    for the MLP; logits are after the final soft-cap."""
    torch = _torch()
    dtype = dtype or torch.float64
    c = config or model.config
    hooks = hooks or {}

    def hooked(key, value):
        for fn in hooks.get(key, ()):
            value = fn(value)
        return value

    def W(name):
        if weights is not None:
            return weights[name]
        return torch.from_numpy(np.asarray(model.weights[name], dtype=np.float64)).to(dtype)

    def linear(x, name, bias: bool):                                    # nn.Linear: x @ W.T + b
        y = x @ W(name + ".weight").T
        return y + W(name + ".bias") if bias else y

    tokens = [int(t) for t in tokens]
    if not 1 <= len(tokens) <= c.n_ctx:
        raise ValueError(f"need 1..{c.n_ctx} tokens, got {len(tokens)}")
    if any(not 0 <= t < c.d_vocab for t in tokens):
        raise ValueError(f"token ids outside the vocabulary [0, {c.d_vocab})")
    n_pos, H, KV, dh = len(tokens), c.n_head, c.n_kv, c.d_head
    act = _ACTIVATIONS[c.activation]
    group = H // KV
    kv_of = [h // group if c.kv_of_head == "repeat" else h % KV for h in range(H)]
    cache = {}
    keep = _keeper(cache, tap)

    def norm(name, x, weight):  # rms_norm over the last dimension, hook_scale on the path of hook_normalized
        if c.norm_plus_one:
            weight = 1.0 + weight       # Gemma2RMSNorm.forward: output * (1.0 + self.weight.float())
        if tap is None:
            normalized, s = rms_norm(x, weight, c.rms_norm_eps)
            keep(name + ".hook_scale", s)
            return keep(name + ".hook_normalized", normalized)
        s = keep(name + ".hook_scale", (x.pow(2).mean(dim=-1, keepdim=True) + c.rms_norm_eps).sqrt())
        return keep(name + ".hook_normalized", x / s * weight)

    embed = W("embed_tokens.weight")[torch.tensor(tokens, dtype=torch.long)]
    if c.embed_scale:
        embed = embed * math.sqrt(c.d_model)  # Gemma2Model.forward's normalizer, hidden_size ** 0.5
    resid = keep("hook_embed", hooked("hook_embed", embed))
    # no position embedding
    for l in range(c.n_layer):
        p, k_ = f"layers.{l}.", f"blocks.{l}."
        theta, scaling = c.layer_rope(l)
        inv_freq = rope_inv_freq(dh, theta, scaling)
        allowed = allowed_keys(n_pos, c.window(l))                       # [query_pos, key_pos]
        resid = keep(k_ + "hook_resid_pre", hooked(k_ + "hook_resid_pre", resid))
        x = norm(k_ + "ln1", resid, W(p + "input_layernorm.weight"))
        q = linear(x, p + "self_attn.q_proj", c.qkv_bias).reshape(n_pos, H, dh)
        k = linear(x, p + "self_attn.k_proj", c.qkv_bias).reshape(n_pos, KV, dh)
        v = linear(x, p + "self_attn.v_proj", c.qkv_bias).reshape(n_pos, KV, dh)
        q = keep(k_ + "attn.hook_q", hooked(k_ + "attn.hook_q", q))
        k = keep(k_ + "attn.hook_k", hooked(k_ + "attn.hook_k", k))
        v = keep(k_ + "attn.hook_v", hooked(k_ + "attn.hook_v", v))
        if c.qk_norm and c.qk_norm_order == "before_rotary":
            # Qwen3Attention / Gemma3Attention.forward: q_norm(q_proj(x).view(..., head_dim)), then rotary
            q = norm(k_ + "attn.q_norm", q, W(p + "self_attn.q_norm.weight"))
            k = norm(k_ + "attn.k_norm", k, W(p + "self_attn.k_norm.weight"))
        q, k = apply_rotary(q, inv_freq, c.rope_pairs), apply_rotary(k, inv_freq, c.rope_pairs)
        if c.qk_norm and c.qk_norm_order == "after_rotary":
            q = norm(k_ + "attn.q_norm", q, W(p + "self_attn.q_norm.weight"))
            k = norm(k_ + "attn.k_norm", k, W(p + "self_attn.k_norm.weight"))
        q = keep(k_ + "attn.hook_rot_q", q)
        k = keep(k_ + "attn.hook_rot_k", k)
        k_h, v_h = k[:, kv_of, :], v[:, kv_of, :]                        # [pos, head, d_head]
        scores = torch.einsum("qhd,khd->hqk", q, k_h)                    # [head, query_pos, key_pos]
        scores = scores * c.attn_scale if c.attn_scale is not None else scores / math.sqrt(dh)
        if c.attn_softcap is not None and c.softcap_order == "before_mask":
            scores = softcap(scores, c.attn_softcap)
        # a query reads only itself and earlier keys, on a sliding layer only the last `window` of them
        scores = scores.masked_fill(~allowed, float("-inf"))
        if c.attn_softcap is not None and c.softcap_order == "after_mask":
            scores = softcap(scores, c.attn_softcap)
        scores = keep(k_ + "attn.hook_attn_scores", scores)
        pattern = keep(k_ + "attn.hook_pattern", hooked(k_ + "attn.hook_pattern", torch.softmax(scores, dim=-1)))
        z = keep(k_ + "attn.hook_z", hooked(k_ + "attn.hook_z", torch.einsum("hqk,khd->qhd", pattern, v_h)))
        w_o = W(p + "self_attn.o_proj.weight").T                         # [n_head*d_head, d_model]
        result = keep(k_ + "attn.hook_result", torch.einsum("qhd,hdm->qhm", z, w_o.reshape(H, dh, c.d_model)))
        if tap is not None:
            attn_out = result.sum(dim=1) + W(p + "self_attn.o_proj.bias") if c.o_bias else result.sum(dim=1)
        else:
            attn_out = linear(z.reshape(n_pos, H * dh), p + "self_attn.o_proj", c.o_bias)
        if c.post_norms:
            attn_out = norm(k_ + "ln1_post", attn_out, W(p + "post_attention_layernorm.weight"))
        attn_out = keep(k_ + "hook_attn_out", hooked(k_ + "hook_attn_out", attn_out))
        resid = keep(k_ + "hook_resid_mid", hooked(k_ + "hook_resid_mid", resid + attn_out))
        ln2_weight = "pre_feedforward_layernorm.weight" if c.post_norms else "post_attention_layernorm.weight"
        x = norm(k_ + "ln2", resid, W(p + ln2_weight))
        gate = keep(k_ + "mlp.hook_pre", hooked(k_ + "mlp.hook_pre", linear(x, p + "mlp.gate_proj", c.mlp_bias)))
        up = keep(k_ + "mlp.hook_pre_linear", linear(x, p + "mlp.up_proj", c.mlp_bias))
        post = keep(k_ + "mlp.hook_post", hooked(k_ + "mlp.hook_post", act(gate) * up))
        mlp_out = linear(post, p + "mlp.down_proj", c.mlp_bias)
        if c.post_norms:
            mlp_out = norm(k_ + "ln2_post", mlp_out, W(p + "post_feedforward_layernorm.weight"))
        mlp_out = keep(k_ + "hook_mlp_out", hooked(k_ + "hook_mlp_out", mlp_out))
        resid = keep(k_ + "hook_resid_post", hooked(k_ + "hook_resid_post", resid + mlp_out))
    final = norm("ln_final", resid, W("norm.weight"))
    logits = final @ W("lm_head.weight").T
    if c.final_softcap is not None:
        logits = softcap(logits, c.final_softcap)  # Gemma2ForCausalLM.forward: / cap, tanh, * cap
    keep("logits", logits)
    return cache


# ---------------------------------------------------------------------------------------------
# GPT-NeoX (GPTNeoXForCausalLM: Pythia): config, weights, float64 forward pass
# ---------------------------------------------------------------------------------------------
# Hugging Face's modeling_gpt_neox.py math: LayerNorm with bias; query_key_value's output viewed
# as [pos, head, 3 * d_head] and split into q, k, v per head; rotary on the first
# int(d_head * rotary_pct) dimensions (rotate-half within them, the rest passed); attention
# scaled by 1/sqrt(d_head); with use_parallel_residual x + attn(ln1(x)) + mlp(ln2(x)), else
# sequential; the unembedding is embed_out.

@dataclasses.dataclass(frozen=True)
class NeoXConfig:
    n_layer: int
    n_head: int
    d_model: int
    d_mlp: int
    n_ctx: int
    d_vocab: int
    rotary_dims: int
    rotary_base: float = 10000.0
    layer_norm_eps: float = 1e-5
    activation: str = "gelu"
    parallel: bool = True
    tie_word_embeddings: bool = False
    # A deliberate mistake, only for showing that a fixture catches it: "blocks" reads
    # query_key_value's output as Q | K | V blocks instead of per head.
    qkv_split: str = "per_head"

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_head

    @staticmethod
    def from_hf(cfg: Mapping) -> "NeoXConfig":
        if cfg.get("model_type") != "gpt_neox":
            raise ValueError(f"config: model_type '{cfg.get('model_type')}' is not gpt_neox")
        d_model, n_head = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        pct = float(cfg.get("partial_rotary_factor", cfg.get("rotary_pct", 0.25)))
        act = cfg.get("hidden_act", "gelu")
        if act not in _ACTIVATIONS:
            raise ValueError(f"config: hidden_act '{act}' is not one of {sorted(_ACTIVATIONS)}")
        if cfg.get("rope_scaling"):
            raise ValueError("config: rope_scaling is not implemented here for GPT-NeoX")
        return NeoXConfig(
            n_layer=int(cfg["num_hidden_layers"]), n_head=n_head, d_model=d_model,
            d_mlp=int(cfg["intermediate_size"]), n_ctx=int(cfg["max_position_embeddings"]),
            d_vocab=int(cfg["vocab_size"]), rotary_dims=int(d_model // n_head * pct),
            rotary_base=float(cfg.get("rotary_emb_base", 10000.0)),
            layer_norm_eps=float(cfg.get("layer_norm_eps", 1e-5)), activation=act,
            parallel=bool(cfg.get("use_parallel_residual", True)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)))


def neox_expected_shapes(c: NeoXConfig) -> Dict[str, Tuple[int, ...]]:
    """Every weight, without the `gpt_neox.` prefix, nn.Linear [out, in]."""
    D, M = c.d_model, c.d_mlp
    shapes: Dict[str, Tuple[int, ...]] = {"embed_in.weight": (c.d_vocab, D), "final_layer_norm.weight": (D,),
                                          "final_layer_norm.bias": (D,)}
    for i in range(c.n_layer):
        p = f"layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (D,), p + "input_layernorm.bias": (D,),
            p + "post_attention_layernorm.weight": (D,), p + "post_attention_layernorm.bias": (D,),
            p + "attention.query_key_value.weight": (3 * D, D), p + "attention.query_key_value.bias": (3 * D,),
            p + "attention.dense.weight": (D, D), p + "attention.dense.bias": (D,),
            p + "mlp.dense_h_to_4h.weight": (M, D), p + "mlp.dense_h_to_4h.bias": (M,),
            p + "mlp.dense_4h_to_h.weight": (D, M), p + "mlp.dense_4h_to_h.bias": (D,),
        })
    if not c.tie_word_embeddings:
        shapes["embed_out.weight"] = (c.d_vocab, D)
    return shapes


_NEOX_BUFFER_RE = re.compile(r"^layers\.\d+\.attention\.(bias|masked_bias|rotary_emb\.inv_freq)$")


@dataclasses.dataclass
class NeoXModel:
    config: NeoXConfig
    weights: Dict[str, np.ndarray]  # names without "gpt_neox."; "embed_out.weight" always present
    dtypes: Dict[str, str]


def load_neox(model_dir: str) -> NeoXModel:
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        c = NeoXConfig.from_hf(json.load(f))
    raw, raw_dtypes = read_checkpoint(model_dir)
    weights, dtypes = {}, {}
    for name, arr in raw.items():
        canon = name[len("gpt_neox."):] if name.startswith("gpt_neox.") else name
        if _NEOX_BUFFER_RE.match(canon):
            continue
        weights[canon], dtypes[canon] = arr, raw_dtypes[name]
    shapes = neox_expected_shapes(c)
    missing, unexpected = sorted(set(shapes) - set(weights)), sorted(set(weights) - set(shapes))
    if missing or unexpected:
        raise ValueError(f"{model_dir}: missing tensors {missing[:8]}, unexpected tensors {unexpected[:8]}")
    for name, shape in shapes.items():
        if tuple(weights[name].shape) != shape:
            raise ValueError(f"{model_dir}: tensor '{name}' has shape {list(weights[name].shape)}, expected {list(shape)}")
    if c.tie_word_embeddings:
        weights["embed_out.weight"], dtypes["embed_out.weight"] = weights["embed_in.weight"], dtypes["embed_in.weight"]
    return NeoXModel(c, weights, dtypes)


def neox_cache_keys(c: NeoXConfig) -> List[str]:
    keys = ["hook_embed"]
    for l in range(c.n_layer):
        b = f"blocks.{l}."
        keys += [b + k for k in (
            "hook_resid_pre", "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_rot_q", "attn.hook_rot_k",
            "attn.hook_attn_scores", "attn.hook_pattern", "attn.hook_z", "attn.hook_result", "hook_attn_out",
            "hook_resid_mid", "mlp.hook_pre", "mlp.hook_post", "hook_mlp_out", "hook_resid_post")]
    return keys + ["ln_final.hook_normalized", "logits"]


def neox_forward(model: NeoXModel, tokens: Sequence[int], config: Optional[NeoXConfig] = None, dtype=None,
                 hooks: Optional[Mapping[str, Sequence]] = None, weights=None, tap=None):
    """The GPT-NeoX forward pass in float64: {cache key: tensor}, keys as neox_cache_keys.
    `hooks` and `tap` as forward(). With parallel residual blocks the MLP reads the block's input,
    and hook_resid_mid = resid_pre + attn_out is the stream that mlp_out is added to
    (resid_post = resid_mid + mlp_out), as in HeadScope's forward pass: an edit there reaches
    resid_post, and its gradient is resid_post's. (TransformerLens does not call hook_resid_mid in
    parallel blocks at all.)"""
    torch = _torch()
    dtype = dtype or torch.float64
    c = config or model.config
    hooks = hooks or {}

    def hooked(key, value):
        for fn in hooks.get(key, ()):
            value = fn(value)
        return value

    def W(name):
        if weights is not None:
            return weights[name]
        return torch.from_numpy(np.asarray(model.weights[name], dtype=np.float64)).to(dtype)

    def linear(x, name):
        return x @ W(name + ".weight").T + W(name + ".bias")

    tokens = [int(t) for t in tokens]
    if not 1 <= len(tokens) <= c.n_ctx or any(not 0 <= t < c.d_vocab for t in tokens):
        raise ValueError(f"need 1..{c.n_ctx} tokens in [0, {c.d_vocab})")
    n_pos, H, dh, D = len(tokens), c.n_head, c.d_head, c.d_model
    act = _ACTIVATIONS[c.activation]
    inv_freq = rope_inv_freq(c.rotary_dims, c.rotary_base, None)
    cache = {}
    keep = _keeper(cache, tap)
    resid = keep("hook_embed", hooked("hook_embed", W("embed_in.weight")[torch.tensor(tokens, dtype=torch.long)]))
    causal = torch.ones(n_pos, n_pos, dtype=torch.bool).tril()
    for l in range(c.n_layer):
        p, k_ = f"layers.{l}.", f"blocks.{l}."
        resid = keep(k_ + "hook_resid_pre", hooked(k_ + "hook_resid_pre", resid))
        x = layer_norm(resid, W(p + "input_layernorm.weight"), W(p + "input_layernorm.bias"), c.layer_norm_eps)
        qkv = linear(x, p + "attention.query_key_value")                 # [pos, 3 * d_model]
        if c.qkv_split == "per_head":
            qkv = qkv.view(n_pos, H, 3 * dh)
            q, k, v = qkv[..., :dh], qkv[..., dh:2 * dh], qkv[..., 2 * dh:]
        else:
            q, k, v = (t.reshape(n_pos, H, dh) for t in qkv.split(D, dim=-1))
        q = keep(k_ + "attn.hook_q", hooked(k_ + "attn.hook_q", q))
        k = keep(k_ + "attn.hook_k", hooked(k_ + "attn.hook_k", k))
        v = keep(k_ + "attn.hook_v", hooked(k_ + "attn.hook_v", v))
        q = keep(k_ + "attn.hook_rot_q", apply_rotary(q, inv_freq))
        k = keep(k_ + "attn.hook_rot_k", apply_rotary(k, inv_freq))
        scores = (torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(dh)).masked_fill(~causal, float("-inf"))
        scores = keep(k_ + "attn.hook_attn_scores", scores)
        pattern = keep(k_ + "attn.hook_pattern", hooked(k_ + "attn.hook_pattern", torch.softmax(scores, dim=-1)))
        z = keep(k_ + "attn.hook_z", hooked(k_ + "attn.hook_z", torch.einsum("hqk,khd->qhd", pattern, v)))
        w_o = W(p + "attention.dense.weight").T
        result = keep(k_ + "attn.hook_result", torch.einsum("qhd,hdm->qhm", z, w_o.reshape(H, dh, D)))
        if tap is not None:
            attn_out = result.sum(dim=1) + W(p + "attention.dense.bias")
        else:
            attn_out = linear(z.reshape(n_pos, D), p + "attention.dense")
        attn_out = keep(k_ + "hook_attn_out", hooked(k_ + "hook_attn_out", attn_out))
        mid = keep(k_ + "hook_resid_mid", hooked(k_ + "hook_resid_mid", resid + attn_out))
        mlp_in = resid if c.parallel else mid
        x = layer_norm(mlp_in, W(p + "post_attention_layernorm.weight"), W(p + "post_attention_layernorm.bias"),
                       c.layer_norm_eps)
        pre = keep(k_ + "mlp.hook_pre", hooked(k_ + "mlp.hook_pre", linear(x, p + "mlp.dense_h_to_4h")))
        post = keep(k_ + "mlp.hook_post", hooked(k_ + "mlp.hook_post", act(pre)))
        mlp_out = keep(k_ + "hook_mlp_out", hooked(k_ + "hook_mlp_out", linear(post, p + "mlp.dense_4h_to_h")))
        resid = keep(k_ + "hook_resid_post", hooked(k_ + "hook_resid_post",
                                                    mid + mlp_out))
    final = keep("ln_final.hook_normalized",
                 layer_norm(resid, W("final_layer_norm.weight"), W("final_layer_norm.bias"), c.layer_norm_eps))
    keep("logits", final @ W("embed_out.weight").T)
    return cache


def load_any(model_dir: str):
    """A GPT2Model, LlamaModel or NeoXModel, by config.json's model_type."""
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        model_type = json.load(f).get("model_type", "gpt2")
    if model_type in LLAMA_FAMILIES:
        return load_llama(model_dir)
    return load_neox(model_dir) if model_type == "gpt_neox" else load_gpt2(model_dir)


def forward_any(model, tokens: Sequence[int], **kwargs):
    """forward(), llama_forward() or neox_forward(), by the model's kind."""
    if isinstance(model, LlamaModel):
        return llama_forward(model, tokens, **kwargs)
    if isinstance(model, NeoXModel):
        return neox_forward(model, tokens, **kwargs)
    return forward(model, tokens, **kwargs)


# ---------------------------------------------------------------------------------------------
# ablation and activation patching, with TransformerLens's conventions
# ---------------------------------------------------------------------------------------------
# Written the way a TransformerLens notebook does them: one hook function per edit, one full
# forward pass per patched run, the metric read from the full logits. Slow on purpose: it is the
# definition HeadScope's batched sweep is measured against.

def ablation_hooks(ablations: Iterable[Tuple[int, int, str]]) -> Dict[str, List]:
    """Hooks on hook_z for [(layer, head, "zero" | "mean")]: the head's z replaced by zeros, or by
    its mean over this prompt's positions (of this run: earlier ablations included)."""
    hooks: Dict[str, List] = {}
    for layer, head, kind in ablations:
        if kind not in ("zero", "mean"):
            raise ValueError(f"ablation kind '{kind}' is not zero or mean")

        def fn(z, head=head, kind=kind):                                     # z: [pos, head, d_head]
            z = z.clone()
            z[:, head, :] = 0.0 if kind == "zero" else z[:, head, :].mean(dim=0, keepdim=True)
            return z
        hooks.setdefault(f"blocks.{layer}.attn.hook_z", []).append(fn)
    return hooks


def edit_hooks(edits: Iterable[Mapping], source_cache=None) -> Dict[str, List]:
    """TransformerLens forward hooks for HeadScope's edits (core/model/intervention.h), written
    from their definition: each edit is {"hook": "attn.hook_z" (a name of HOOK_POINTS), "layer",
    "unit" (head, key/value head or neuron; -1: the whole row), "pos" (-1: every position),
    "kind": "zero" | "mean" | "patch" | "steer", "vector" and "scale" (steer)}. A mean is over
    the positions of this run at that hook; a patch copies `source_cache`'s value; steering adds
    scale * vector. attn.hook_pattern is [head, query_pos, key_pos], the others [pos, ...]."""
    torch = _torch()
    hooks: Dict[str, List] = {}
    for e in edits:
        name, unit, pos, kind = e["hook"], int(e.get("unit", -1)), int(e.get("pos", -1)), e["kind"]
        key = name if name in ("hook_embed", "hook_pos_embed") else f"blocks.{int(e['layer'])}.{name}"
        if kind not in ("zero", "mean", "patch", "steer"):
            raise ValueError(f"edit kind '{kind}' is not zero, mean, patch or steer")

        def fn(act, name=name, key=key, unit=unit, pos=pos, kind=kind, e=e):
            act = act.clone()
            pattern = name == "attn.hook_pattern"
            # the index of the edited part: (positions, unit columns)
            rows = slice(None) if pos < 0 else slice(pos, pos + 1)
            if pattern:
                index = (slice(None) if unit < 0 else unit, rows)        # [head, query_pos, key_pos]
            elif act.dim() == 3:
                index = (rows, slice(None) if unit < 0 else unit)        # [pos, head, d_head]
            else:
                index = (rows, slice(None) if unit < 0 else slice(unit, unit + 1))  # [pos, width]
            if kind == "zero":
                act[index] = 0.0
            elif kind == "mean":
                act[index] = act[index].mean(dim=0, keepdim=True)
            elif kind == "patch":
                act[index] = source_cache[key].to(act.dtype)[index]
            else:
                v = torch.tensor(e["vector"], dtype=act.dtype) * float(e["scale"])
                act[index] = act[index] + v.reshape(act[index].shape[1:] if act.dim() == 3 and unit < 0 else v.shape)
            return act
        hooks.setdefault(key, []).append(fn)
    return hooks


def parse_ablations(text: str) -> List[Tuple[int, int, str]]:
    """"3.2,1.0:mean" -> [(3, 2, "zero"), (1, 0, "mean")], as headscope-cli run --ablate."""
    out = []
    for item in text.split(","):
        head, _, kind = item.partition(":")
        layer, _, h = head.partition(".")
        out.append((int(layer), int(h), kind or "zero"))
    return out


PATCH_SITES = {"resid_pre": "hook_resid_pre", "attn_out": "hook_attn_out", "mlp_out": "hook_mlp_out",
               "z": "attn.hook_z", "z_pos": "attn.hook_z", "mlp_post": "mlp.hook_post"}


def logit_difference(logits, answer: int, wrong: int) -> float:
    """The patching metric: logit(answer) - logit(wrong) at the last position."""
    return float(logits[-1, answer] - logits[-1, wrong])


def patch_hook(site: str, layer: int, index, clean_cache) -> Dict[str, List]:
    """The hook of one patched run: position `index` of resid_pre / attn_out / mlp_out, head
    `index` of z at every position, (head, pos) = `index` of z_pos, or neuron `index` of mlp_post
    at every position, copied from the clean run into the running (corrupted) one."""
    key = f"blocks.{layer}.{PATCH_SITES[site]}"
    source = clean_cache[key]

    def fn(act):
        act = act.clone()
        if site == "z":
            act[:, index, :] = source[:, index, :]
        elif site == "z_pos":
            head, pos = index
            act[pos, head, :] = source[pos, head, :]
        elif site == "mlp_post":
            act[:, index] = source[:, index]
        else:
            act[index] = source[index]
        return act
    return {key: [fn]}


def patching_sweep(model, clean_tokens: Sequence[int], corrupt_tokens: Sequence[int], answer: Optional[int],
                   wrong: Optional[int], site: str, dtype=None, weights=None, metric=None) -> Dict[str, object]:
    """Activation patching from the clean run into the corrupted one, one full run per cell (any
    family): raw [n_layer, pos] (resid_pre, attn_out, mlp_out), [n_layer, n_head] (z),
    [n_layer, n_head, pos] (z_pos) or [n_layer, d_mlp] (mlp_post) holds the metric of each
    patched run and normalized = (raw - metric_corrupt) / (metric_clean - metric_corrupt). The
    metric is logit(answer) - logit(wrong) at the last position, or `metric` (a Metric)."""
    if site not in PATCH_SITES:
        raise ValueError(f"site '{site}' is not one of {sorted(PATCH_SITES)}")
    if len(clean_tokens) != len(corrupt_tokens):
        raise ValueError(f"clean ({len(clean_tokens)}) and corrupted ({len(corrupt_tokens)}) token counts differ")
    weights = weights if weights is not None else torch_weights(model, dtype)
    c = model.config
    extra = {"attn_result": False} if isinstance(model, GPT2Model) else {}

    def run(tokens, hooks=None):
        return forward_any(model, tokens, dtype=dtype, weights=weights, hooks=hooks, **extra)

    def score(cache, tokens):
        if metric is None:
            return logit_difference(cache["logits"], answer, wrong)
        return float(metric.value(cache, tokens))
    clean = run(clean_tokens)
    m_clean = score(clean, clean_tokens)
    m_corrupt = score(run(corrupt_tokens), corrupt_tokens)
    n = len(corrupt_tokens)
    shape = {"z": (c.n_head,), "z_pos": (c.n_head, n), "mlp_post": (c.d_mlp,)}.get(site, (n,))
    raw = np.zeros((c.n_layer,) + shape)
    for layer in range(c.n_layer):
        for index in np.ndindex(*shape):
            cell = index if site == "z_pos" else index[0]
            raw[(layer,) + index] = score(run(corrupt_tokens, patch_hook(site, layer, cell, clean)), corrupt_tokens)
    return {"metric_clean": m_clean, "metric_corrupt": m_corrupt, "raw": raw,
            "normalized": (raw - m_corrupt) / (m_clean - m_corrupt)}


def cache_keys(n_layer: int) -> List[str]:
    """Every key of the activation cache contract, in forward order."""
    keys = ["hook_embed", "hook_pos_embed"]
    for l in range(n_layer):
        b = f"blocks.{l}."
        keys += [b + "hook_resid_pre", b + "attn.hook_q", b + "attn.hook_k", b + "attn.hook_v",
                 b + "attn.hook_attn_scores", b + "attn.hook_pattern", b + "attn.hook_z",
                 b + "attn.hook_result", b + "hook_attn_out", b + "hook_resid_mid",
                 b + "mlp.hook_pre", b + "mlp.hook_post", b + "hook_mlp_out", b + "hook_resid_post"]
    return keys + ["ln_final.hook_normalized", "logits"]


def cache_to_float32(cache, tokens: Sequence[int]) -> Dict[str, np.ndarray]:
    """The on-disk form: float32 arrays (masked scores stay -inf) plus "tokens" as float32."""
    out = {k: np.asarray(v.detach().cpu().numpy() if hasattr(v, "detach") else v, dtype=np.float32)
           for k, v in cache.items()}
    out["tokens"] = np.asarray([int(t) for t in tokens], dtype=np.float32)
    return out


# ---------------------------------------------------------------------------------------------
# gradients: metrics, grad(), attribution patching (AtP and AtP*'s QK fix), input attributions
# ---------------------------------------------------------------------------------------------
# Everything here is PyTorch autograd in float64 through the forward passes above, with a `tap`
# that keeps every cache tensor's gradient (retain_grad; the embeddings become leaves). A key's
# gradient is the total derivative of the metric with respect to that activation, what a
# TransformerLens backward hook at the hook point receives.

METRIC_KINDS = ("logit_diff", "logit", "logprob", "loss", "dot")


@dataclasses.dataclass(frozen=True)
class Metric:
    """What to differentiate (issue 23 part 2), at position `pos` (None: the last; negative
    counts from the end):
      logit_diff  logits[pos, answer] - logits[pos, wrong]
      logit       logits[pos, answer]
      logprob     log_softmax(logits[pos])[answer]
      loss        mean over p = 0..S-2 of -log_softmax(logits[p])[tokens[p + 1]] (pos unused)
      dot         activation(hook)[pos] . vector: the row at pos flattened ([head * d_head] for
                  [pos, head, d_head] keys), or with `head` that head's [d_head] (or [d_model] of
                  hook_result); for hook_pattern ([head, query, key]) pos is the query and the
                  row is [head * key] (or [key] of `head`).
    """
    kind: str
    answer: Optional[int] = None
    wrong: Optional[int] = None
    pos: Optional[int] = None
    hook: Optional[str] = None
    vector: Optional[Tuple[float, ...]] = None
    head: Optional[int] = None

    def __post_init__(self):
        if self.kind not in METRIC_KINDS:
            raise ValueError(f"metric '{self.kind}' is not one of {', '.join(METRIC_KINDS)}")
        if self.kind in ("logit_diff", "logit", "logprob") and self.answer is None:
            raise ValueError(f"metric {self.kind} needs an answer token")
        if self.kind == "logit_diff" and self.wrong is None:
            raise ValueError("metric logit_diff needs a wrong token")
        if self.kind == "dot" and (self.hook is None or self.vector is None):
            raise ValueError("metric dot needs a hook key and a vector")

    def position(self, n_pos: int) -> int:
        p = n_pos - 1 if self.pos is None else int(self.pos)
        p = p + n_pos if p < 0 else p
        if not 0 <= p < n_pos:
            raise ValueError(f"metric position {self.pos} is outside the prompt's {n_pos} positions")
        return p

    def value(self, cache, tokens: Sequence[int]):
        """The metric as a torch scalar (differentiable through `cache`)."""
        torch = _torch()
        n = len(tokens)
        if self.kind == "loss":
            if n < 2:
                raise ValueError("metric loss needs at least 2 tokens (it predicts each next token)")
            logp = torch.log_softmax(cache["logits"][:-1], dim=-1)
            nxt = torch.tensor([int(t) for t in tokens[1:]], dtype=torch.long)
            return -logp[torch.arange(n - 1), nxt].mean()
        p = self.position(n)
        if self.kind == "dot":
            if self.hook not in cache:
                raise ValueError(f"metric dot: '{self.hook}' is not a key of this model's cache")
            a = cache[self.hook]
            by_head = self.hook.endswith("attn.hook_pattern") or self.hook.endswith("attn.hook_attn_scores")
            row = (a[:, p] if self.head is None else a[self.head, p]) if by_head else \
                (a[p] if self.head is None else a[p, self.head])
            row = row.reshape(-1)
            vec = torch.tensor([float(x) for x in self.vector], dtype=row.dtype)
            if vec.shape != row.shape:
                raise ValueError(f"metric dot: the vector has {vec.numel()} values, {self.hook}'s row has {row.numel()}")
            return (row * vec).sum()
        logits = cache["logits"][p]
        if self.kind == "logit_diff":
            return logits[int(self.answer)] - logits[int(self.wrong)]
        if self.kind == "logit":
            return logits[int(self.answer)]
        return torch.log_softmax(logits, dim=-1)[int(self.answer)]


def _grad_tap(key, value):
    """Keeps the gradient of every cache tensor: the embeddings (which need none) become leaves.
    Each key gets a node of its own (a clone), as a TransformerLens HookPoint is a module of its
    own: where two keys hold the same value (resid_post of layer l and resid_pre of layer l + 1;
    Llama's hook_embed and resid_pre of layer 0) a metric read at the earlier one does not reach
    the later one."""
    if value.requires_grad:
        value = value.clone()
        value.retain_grad()
        return value
    return value.detach().clone().requires_grad_(True)


def _backward(model, tokens: Sequence[int], metric: Metric, hooks=None):
    """(metric value, cache {key: detached tensor}, grads {key: tensor}) of one forward and one
    backward pass; keys off the autograd path (grad None) are not in grads."""
    torch = _torch()
    with torch.enable_grad():
        cache = forward_any(model, tokens, hooks=hooks, tap=_grad_tap)
        m = metric.value(cache, tokens)
        m.backward()
    grads = {k: v.grad.detach() for k, v in cache.items() if v.grad is not None}
    return float(m), {k: v.detach() for k, v in cache.items()}, grads


def grad(model, tokens: Sequence[int], metric: Metric) -> Tuple[float, Dict[str, np.ndarray]]:
    """(metric value, {cache key: dM/d(activation) as a float64 ndarray of the key's shape}).

    A key is included exactly when the metric depends on it through the forward pass (autograd
    reaches it): every key upstream of the metric, for every row; rows and entries that do not
    influence the metric are zeros (positions after `pos`, the logits of other positions, masked
    attention scores - masked_fill(-inf) before the softmax gives them 0). Left out: keys
    downstream of a dot metric's hook (e.g. logits for dot on blocks.0.hook_resid_post) and keys
    beside it in its layer that do not feed it. Conventions, as TransformerLens's backward hooks with use_attn_result:
    hook_result feeds hook_attn_out = sum over heads + b_O; hook_q / hook_k (before rotation) and
    hook_rot_q / hook_rot_k are all on the path; hook_pattern's gradient above the diagonal is
    dM/dz[q] . v[k] (z = pattern @ v reads every entry) and is kept; hook_k / hook_v with
    grouped-query attention have n_kv heads, so their gradients are summed over the query heads
    that share them; RMSNorm's hook_scale feeds hook_normalized = x / scale * w (the gradient at
    hook_scale is sum_d dM/dnormalized_d * w_d * -x_d / scale^2)."""
    m, _, grads = _backward(model, tokens, metric)
    return m, {k: g.numpy().astype(np.float64) for k, g in grads.items()}


def grads_to_float32(metric: float, grads: Mapping[str, np.ndarray], tokens: Sequence[int]) -> Dict[str, np.ndarray]:
    """The grad file's arrays (headscope-cli grad's NPZ contract): "metric" float64 [1], "tokens"
    int32 [pos], and "KEY.grad" float32 for every key in `grads`."""
    out = {k + ".grad": np.asarray(g, dtype=np.float32) for k, g in grads.items()}
    out["metric"] = np.asarray([metric], dtype=np.float64)
    out["tokens"] = np.asarray([int(t) for t in tokens], dtype=np.int32)
    return out


def attention_scale(model, layer: int) -> float:
    """The factor hook_attn_scores = (rot_)q . k * factor of `layer`: 1/sqrt(d_head), for GPT-2
    also the config's scale_attn_weights and scale_attn_by_inverse_layer_idx (1 / (layer + 1))."""
    c = model.config
    if isinstance(model, GPT2Model):
        f = 1.0 / math.sqrt(c.d_head) if c.scale_attn_weights else 1.0
        return f / float(layer + 1) if c.scale_attn_by_inverse_layer_idx else f
    if isinstance(c, LlamaConfig) and c.attn_scale is not None:
        return c.attn_scale  # Gemma: query_pre_attn_scalar^-0.5
    return 1.0 / math.sqrt(c.d_head)


def masked_scores(model, layer: int, raw):
    """hook_attn_scores from raw = (rot_)q . k * attention_scale [..., query, key]: the soft-cap
    where the model has one (Gemma 2), then -inf outside the keys each query may read (the
    causal mask, and a sliding layer's window)."""
    c = model.config
    n = raw.shape[-1]
    cap = getattr(c, "attn_softcap", None)
    if cap is not None:
        raw = softcap(raw, cap)
    window = c.window(layer) if isinstance(c, LlamaConfig) else 0
    return raw.masked_fill(~allowed_keys(n, window), float("-inf"))


def kv_head_of(model) -> List[int]:
    """The key/value head each query head reads (repeat_kv: h // (n_head / n_kv))."""
    c = model.config
    kv = getattr(c, "n_kv", c.n_head)
    return [h // (c.n_head // kv) for h in range(c.n_head)]


def _site_key(what: str, layer: int) -> str:
    return f"blocks.{layer}.{PATCH_SITES[what]}"


def _linear_estimate(what: str, delta, g):
    """(a_clean - a_corrupt) . dM/da summed the way each `what` groups its nodes."""
    prod = delta * g
    if what in ("resid_pre", "attn_out", "mlp_out"):
        return prod.sum(dim=-1)                        # [pos]
    if what == "z":
        return prod.sum(dim=(0, 2))                    # [head]
    if what == "z_pos":
        return prod.sum(dim=2).T                       # [head, pos]
    return prod.sum(dim=0)                             # mlp_post: [neuron]


def _qk_fixed_head_rows(model, layer: int, head: int, clean, corrupt, grads):
    """AtP*'s estimate for patching head `head`'s z row by row: [query pos] of the metric's change
    when z[t, head] is recomputed from the clean run's query, keys and values (see atp())."""
    torch = _torch()
    b = f"blocks.{layer}."
    rot = b + "attn.hook_rot_q" in corrupt
    qname, kname = ("attn.hook_rot_q", "attn.hook_rot_k") if rot else ("attn.hook_q", "attn.hook_k")
    kvh = kv_head_of(model)[head]
    q_c, q_n = clean[b + qname][:, head], corrupt[b + qname][:, head]          # [pos, d_head]
    k_c, k_n = clean[b + kname][:, kvh], corrupt[b + kname][:, kvh]
    v_c, v_n = clean[b + "attn.hook_v"][:, kvh], corrupt[b + "attn.hook_v"][:, kvh]
    scale = attention_scale(model, layer)

    def pattern(q, k):                                                           # [query, key]
        return torch.softmax(masked_scores(model, layer, q @ k.T * scale), dim=-1)
    a_n = corrupt[b + "attn.hook_pattern"][head]
    if not torch.allclose(pattern(q_n, k_n), a_n, rtol=1e-9, atol=1e-12):
        raise AssertionError(f"layer {layer}: recomputed pattern differs from the cache (attention scale?)")
    g_z = grads.get(b + "attn.hook_z", torch.zeros_like(corrupt[b + "attn.hook_z"]))[:, head]  # [pos, d_head]
    g_a = g_z @ v_n.T                                  # dM/dA[t, s] = dM/dz[t] . v[s]: [query, key]
    d_a = (pattern(q_c, k_n) - a_n) + (pattern(q_n, k_c) - a_n)
    through_values = ((a_n @ (v_c - v_n)) * g_z).sum(dim=-1)                   # [query]
    return (d_a * g_a).sum(dim=-1) + through_values


def atp(model, clean_tokens: Sequence[int], corrupt_tokens: Sequence[int], answer: Optional[int],
        wrong: Optional[int], what: str, method: str = "atp", metric: Optional[Metric] = None) -> Dict[str, object]:
    """Attribution patching (issue 23 part 4): the linear estimate of patching_sweep's cells from
    one clean forward pass and one forward + backward pass on the corrupted prompt,
        raw = m_corrupt + (a_clean - a_corrupt) . dM/da      (dM/da on the corrupted run)
        normalized = (raw - m_corrupt) / (m_clean - m_corrupt)
    in patching_sweep's layout: resid_pre, attn_out, mlp_out [layer][pos] (the dot product over
    d_model at one position), z [layer][head] (over every position and d_head), z_pos
    [layer][head][pos] (over d_head at one position), mlp_post [layer][neuron] (over every
    position). M is logit(answer) - logit(wrong) at the last position unless `metric` is given. A
    site the metric does not depend on has dM/da = 0 (raw = m_corrupt).

    method="atp_qk": AtP*'s QK fix (Kramar, Lieberum, Shah, Nanda 2024, "AtP*: An efficient and
    scalable method for localizing LLM behaviour to components", arXiv 2403.00745: the section on
    false negatives from attention saturation, the "QK fix"). It changes only what = z and z_pos, the nodes that are an
    attention head (its query, keys and values); resid_pre, attn_out, mlp_out and mlp_post are
    plain AtP (AtP* recomputes no softmax downstream of a node). Patching z[t, h] from the clean
    run is recomputing z[t, h] = sum_s A[t, s] v[s] with the clean query q_t, the clean keys and
    the clean values of head h (the rotated query and keys where the model has rotary; with
    grouped-query attention the keys and values of the key/value head h reads). AtP* splits
    that into the query, key and value parts, each taken alone from the corrupted run:
      queries:  A_Q[t] = softmax(scale * q_clean[t] . k_corrupt[s], masked s > t)
      keys:     A_K[t] = softmax(scale * q_corrupt[t] . k_clean[s], masked)
      values:   linear, sum_s A_corrupt[t, s] (v_clean[s] - v_corrupt[s]) . dM/dz[t]
    the softmax recomputed exactly (no linearisation through it: a saturated softmax has a
    near-zero gradient but can still flip), and the change of the pattern then taken linearly:
      c[t] = sum_s (A_Q[t, s] - A[t, s] + A_K[t, s] - A[t, s]) * dM/dA[t, s]  +  values part,
    with dM/dA[t, s] = dM/dz[t] . v_corrupt[s] (hook_pattern's gradient for that head).
    z_pos[l][h][t] = m_corrupt + c[t]; z[l][h] = m_corrupt + sum_t c[t]. The query x key and
    pattern x value interaction terms are left out (AtP* sums separate q, k and v nodes), so on z
    it is not the same as plain AtP, which uses z's exact difference (already through this
    head's softmax) and linearises only downstream of z. Written from the paper's definition: no
    public implementation was found to follow (TransformerLens has none, issue #1742; Neel
    Nanda's attribution patching demo notebook has plain AtP only)."""
    if what not in PATCH_SITES:
        raise ValueError(f"what '{what}' is not one of {sorted(PATCH_SITES)}")
    if method not in ("atp", "atp_qk"):
        raise ValueError(f"method '{method}' is not atp or atp_qk")
    if len(clean_tokens) != len(corrupt_tokens):
        raise ValueError(f"clean ({len(clean_tokens)}) and corrupted ({len(corrupt_tokens)}) token counts differ")
    torch = _torch()
    metric = metric or Metric("logit_diff", answer, wrong)
    clean = {k: v.detach() for k, v in forward_any(model, clean_tokens, tap=lambda k, v: v).items()}
    m_clean = float(metric.value(clean, clean_tokens))
    m_corrupt, corrupt, grads = _backward(model, corrupt_tokens, metric)
    c = model.config
    rows = []
    for layer in range(c.n_layer):
        if method == "atp_qk" and what in ("z", "z_pos"):
            per_head = torch.stack([_qk_fixed_head_rows(model, layer, h, clean, corrupt, grads)
                                    for h in range(c.n_head)])                  # [head, pos]
            rows.append(per_head.sum(dim=1) if what == "z" else per_head)
            continue
        key = _site_key(what, layer)
        g = grads.get(key, torch.zeros_like(corrupt[key]))
        rows.append(_linear_estimate(what, clean[key] - corrupt[key], g))
    raw = m_corrupt + torch.stack(rows).numpy()
    return {"what": what, "method": method, "metric_clean": m_clean, "metric_corrupt": m_corrupt,
            "raw": raw, "normalized": (raw - m_corrupt) / (m_clean - m_corrupt)}


ATTRIBUTE_METHODS = ("grad_x_input", "integrated_gradients")


def attribute(model, tokens: Sequence[int], metric: Metric, method: str = "grad_x_input",
              steps: int = 32) -> Dict[str, object]:
    """Input-token attributions on the token embeddings x = hook_embed (issue 23 part 5); the
    baseline x' is x at position 0 and zero token embeddings at every other position (learned
    position embeddings stay as they are and are not attributed). attributions[p] =
    sum_d (x - x')[p, d] * gbar[p, d], 0 at position 0, where gbar is dM/dx at x (grad_x_input)
    or the mean of dM/dx at x' + alpha_k (x - x') over alpha_k = (k + 0.5) / steps, k = 0..steps-1
    (integrated_gradients, the midpoint rule). metric = M(x), baseline_metric = M(x'),
    completeness_error = sum(attributions) - (metric - baseline_metric) (-> 0 for integrated
    gradients as steps grow; for grad_x_input it measures how far M is from linear in x)."""
    if method not in ATTRIBUTE_METHODS:
        raise ValueError(f"method '{method}' is not one of {', '.join(ATTRIBUTE_METHODS)}")
    if steps < 1:
        raise ValueError(f"steps {steps}: need at least 1")
    torch = _torch()
    x = forward_any(model, tokens)["hook_embed"].detach()
    base = torch.zeros_like(x)
    base[0] = x[0]

    def at(e):
        m, _, grads = _backward(model, tokens, metric, hooks={"hook_embed": [lambda _a, e=e: e]})
        return m, grads["hook_embed"]
    m, g = at(x)
    m_base = at(base)[0]
    if method == "integrated_gradients":
        g = torch.zeros_like(x)
        for k in range(steps):
            g = g + at(base + (k + 0.5) / steps * (x - base))[1]
        g = g / steps
    attr = ((x - base) * g).sum(dim=-1)
    return {"tokens": [int(t) for t in tokens], "method": method, "steps": steps,
            "attributions": attr.tolist(), "metric": m, "baseline_metric": m_base,
            "completeness_error": float(attr.sum()) - (m - m_base)}


# ---------------------------------------------------------------------------------------------
# analyses: the logit lens and a head's QK / OV circuits (float64, materialized the slow way)
# ---------------------------------------------------------------------------------------------

def logit_lens(model: GPT2Model, tokens: Sequence[int], cache=None):
    """The logit lens, [n_layer + 1, pos, d_vocab] log-probabilities (torch float64): stream
    i < n_layer is blocks.{i}.hook_resid_pre, stream n_layer the final hook_resid_post; each goes
    through ln_f (its own mean and variance per vector, its weight and bias), lm_head and a
    log-softmax over the vocabulary. Stream n_layer equals log_softmax(logits)."""
    torch = _torch()
    c = model.config
    cache = cache if cache is not None else forward(model, tokens)

    def W(name):
        return torch.from_numpy(np.asarray(model.weights[name], dtype=np.float64))

    streams = [cache[f"blocks.{l}.hook_resid_pre"] for l in range(c.n_layer)]
    streams.append(cache[f"blocks.{c.n_layer - 1}.hook_resid_post"])
    out = []
    for resid in streams:                                                    # [pos, d_model]
        normalized = layer_norm(resid, W("ln_f.weight"), W("ln_f.bias"), c.layer_norm_eps)
        out.append(torch.log_softmax(normalized @ W("lm_head.weight").T, dim=-1))  # [pos, d_vocab]
    return torch.stack(out)                                                  # [stream, pos, d_vocab]


def head_matrices(model: GPT2Model, layer: int, head: int):
    """Head (layer, head)'s W_Q, W_K, W_V [d_model, d_head] with ln_1's weight folded in
    (diag(w) W), and W_O [d_head, d_model]; TransformerLens's [in, out] convention, float64.
    Biases are ignored."""
    torch = _torch()
    c = model.config
    if not (0 <= layer < c.n_layer and 0 <= head < c.n_head):
        raise ValueError(f"head {layer}.{head} does not exist ({c.n_layer} layers of {c.n_head} heads)")
    D, dh = c.d_model, c.d_head
    p = f"h.{layer}."
    c_attn = torch.from_numpy(np.asarray(model.weights[p + "attn.c_attn.weight"], dtype=np.float64))
    ln_1 = torch.from_numpy(np.asarray(model.weights[p + "ln_1.weight"], dtype=np.float64))
    cols = slice(head * dh, (head + 1) * dh)
    W_Q = ln_1[:, None] * c_attn[:, 0 * D:1 * D][:, cols]
    W_K = ln_1[:, None] * c_attn[:, 1 * D:2 * D][:, cols]
    W_V = ln_1[:, None] * c_attn[:, 2 * D:3 * D][:, cols]
    W_O = torch.from_numpy(np.asarray(model.weights[p + "attn.c_proj.weight"], dtype=np.float64))[cols, :]
    return W_Q, W_K, W_V, W_O


def embed_unembed(model: GPT2Model):
    """W_E [d_vocab, d_model] and W_U [d_model, d_vocab] with ln_f's weight folded into W_U."""
    torch = _torch()
    W_E = torch.from_numpy(np.asarray(model.weights["wte.weight"], dtype=np.float64))
    ln_f = torch.from_numpy(np.asarray(model.weights["ln_f.weight"], dtype=np.float64))
    W_U = ln_f[:, None] * torch.from_numpy(np.asarray(model.weights["lm_head.weight"], dtype=np.float64)).T
    return W_E, W_U


def token_vectors(model: GPT2Model, vectors: str = "raw"):
    """[d_vocab, d_model] token vectors. "raw": the embedding rows W_E. "extended": what a head after
    layer 0 reads of a token alone: W_E + MLP0(ln_2(W_E)) with layer 0's ln_2, c_fc, activation and
    c_proj (weights and biases), no position and no layer-0 attention; then the reading layer's
    LayerNorm without its weight (folded into W_Q, W_K, W_V) or bias (ignored): centred and divided
    by sqrt(var + eps)."""
    torch = _torch()
    W_E, _ = embed_unembed(model)
    if vectors == "raw":
        return W_E
    if vectors != "extended":
        raise ValueError(f"token vectors '{vectors}': use raw or extended")
    c = model.config
    w = {k: torch.from_numpy(np.asarray(v, dtype=np.float64)) for k, v in model.weights.items()}
    x = layer_norm(W_E, w["h.0.ln_2.weight"], w["h.0.ln_2.bias"], c.layer_norm_eps)
    hidden = _ACTIVATIONS[c.activation](x @ w["h.0.mlp.c_fc.weight"] + w["h.0.mlp.c_fc.bias"])
    ext = W_E + hidden @ w["h.0.mlp.c_proj.weight"] + w["h.0.mlp.c_proj.bias"]
    ones = torch.ones(c.d_model, dtype=torch.float64)
    return layer_norm(ext, ones, torch.zeros_like(ones), c.layer_norm_eps)


def circuits(model: GPT2Model, layer: int, head: int, tokens: Sequence[int] = (), top_k: int = 10,
             vectors: str = "raw") -> dict:
    """A head's QK and OV circuits, computed by materializing everything (the obvious way, which
    the C++ avoids): W_QK = W_Q W_K^T and W_OV = W_V W_O as d_model x d_model matrices, their
    singular values by a full SVD (the d_head largest); the full OV circuit W_E W_OV W_U as a
    d_vocab x d_vocab matrix, its eigenvalues by a full eigendecomposition (the d_head largest in
    magnitude: the rest are zero up to rounding), sorted by descending real part, then descending
    imaginary part; copying score sum(lambda) / sum(|lambda|) over all d_vocab eigenvalues. ln_1's
    weight folded into W_Q, W_K, W_V and ln_f's into W_U; biases, centring, the norms' division,
    positions and the 1/sqrt(d_head) scale ignored. With `tokens`: qk_scores [pos, pos] =
    E W_QK E^T over the tokens' embedding rows, and for each token the top_k entries of its row of
    E W_OV W_U and its own entry (value and rank). `vectors`: the token vectors E (token_vectors);
    the unembedding stays W_U."""
    torch = _torch()
    dh = model.config.d_head
    W_Q, W_K, W_V, W_O = head_matrices(model, layer, head)
    _, W_U = embed_unembed(model)
    W_E = token_vectors(model, vectors)
    W_QK = W_Q @ W_K.T                                                       # [d_model, d_model]
    W_OV = W_V @ W_O                                                         # [d_model, d_model]
    full_ov = W_E @ W_OV @ W_U                                               # [d_vocab, d_vocab]
    eig = torch.linalg.eigvals(full_ov)                                      # [d_vocab] complex
    top = eig[torch.argsort(eig.abs(), descending=True)[:dh]].tolist()
    top.sort(key=lambda z: (-z.real, -z.imag))
    out = {
        "layer": layer, "head": head, "vectors": vectors,
        "qk_singular_values": torch.linalg.svdvals(W_QK)[:dh].tolist(),
        "ov_singular_values": torch.linalg.svdvals(W_OV)[:dh].tolist(),
        "ov_eigenvalues_real": [z.real for z in top],
        "ov_eigenvalues_imag": [z.imag for z in top],
        "copying_score": float(eig.sum().real / eig.abs().sum()),
    }
    if len(tokens):
        ids = torch.tensor([int(t) for t in tokens], dtype=torch.long)
        E = W_E[ids]                                                         # [pos, d_model]
        out["tokens"] = [int(t) for t in tokens]
        out["qk_scores"] = (E @ W_QK @ E.T).tolist()                         # [query pos, key pos]
        rows = full_ov[ids]                                                  # [pos, d_vocab]
        values, indices = torch.sort(rows, dim=-1, descending=True, stable=True)
        out["ov_top_ids"] = indices[:, :top_k].tolist()
        out["ov_top_logits"] = values[:, :top_k].tolist()
        self_values = rows[torch.arange(len(ids)), ids]
        out["ov_self_logits"] = self_values.tolist()
        out["ov_self_ranks"] = (rows > self_values[:, None]).sum(dim=-1).tolist()
    return out


def copying_scores(model: GPT2Model) -> List[List[float]]:
    """[layer][head] copying scores (see `circuits`)."""
    c = model.config
    return [[circuits(model, l, h)["copying_score"] for h in range(c.n_head)] for l in range(c.n_layer)]


# ---------------------------------------------------------------------------------------------
# cache files and comparison
# ---------------------------------------------------------------------------------------------

def load_cache(path: str) -> Dict[str, np.ndarray]:
    """Reads a cache from .npz (numpy) or .safetensors."""
    if path.endswith(".safetensors"):
        return dict(read_safetensors(path))
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def save_cache(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    if path.endswith(".safetensors"):
        write_safetensors(path, arrays, dtypes="F32")
    elif path.endswith(".npz"):
        np.savez(path, **arrays)
    else:
        raise ValueError(f"output '{path}': use a .npz or .safetensors extension")


@dataclasses.dataclass
class KeyResult:
    key: str
    ok: bool
    max_abs: float = 0.0
    max_rel: float = 0.0
    scale: float = 0.0
    note: str = ""


TINY = 1e-30


def compare_arrays(key: str, ref: np.ndarray, cand: np.ndarray, rtol: float) -> KeyResult:
    """Relative difference of a key = max |ref - cand| / max(max |ref|, 1e-30), both maxima taken
    over the positions where the reference is finite: relative to the key's largest magnitude, so
    values near zero do not blow it up. Non-finite reference positions (masked scores are -inf)
    must hold exactly the same value in the candidate (-inf for -inf, +inf for +inf, NaN for NaN);
    a non-finite candidate value where the reference is finite fails the key."""
    ref = np.asarray(ref, dtype=np.float64)
    cand = np.asarray(cand, dtype=np.float64)
    if ref.shape != cand.shape:
        return KeyResult(key, False, math.inf, math.inf, note=f"shape {list(cand.shape)} != reference {list(ref.shape)}")
    finite = np.isfinite(ref)
    nonfinite_ok = np.array_equal(np.isnan(ref), np.isnan(cand)) and np.array_equal(
        ref[np.isinf(ref)], cand[np.isinf(ref)])
    cand_bad = ~np.isfinite(cand[finite])
    if not finite.any():
        return KeyResult(key, nonfinite_ok, 0.0, 0.0, note="" if nonfinite_ok else "non-finite values differ")
    scale = float(np.max(np.abs(ref[finite])))
    diff = np.abs(ref[finite] - cand[finite])
    max_abs = math.inf if cand_bad.any() else float(np.max(diff))
    max_rel = max_abs / max(scale, TINY)
    notes = []
    if not nonfinite_ok:
        notes.append("non-finite positions differ (e.g. a masked score is not -inf)")
    if cand_bad.any():
        notes.append(f"{int(cand_bad.sum())} non-finite candidate values where the reference is finite")
    ok = nonfinite_ok and not cand_bad.any() and max_rel <= rtol
    return KeyResult(key, ok, max_abs, max_rel, scale, "; ".join(notes))


def _natural_key(s: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def compare_caches(reference: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray],
                   rtol: float = 1e-4, keys: Optional[Iterable[str]] = None) -> List[KeyResult]:
    """Compares every reference key (or `keys`); a key missing from the candidate fails."""
    results = []
    for key in sorted(keys if keys is not None else reference, key=_natural_key):
        if key not in candidate:
            results.append(KeyResult(key, False, math.inf, math.inf, note="missing from candidate"))
        elif key not in reference:
            results.append(KeyResult(key, False, math.inf, math.inf, note="missing from reference"))
        else:
            results.append(compare_arrays(key, reference[key], candidate[key], rtol))
    return results


# ---------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------

def _parse_tokens(text: str) -> List[int]:
    try:
        return [int(t) for t in text.replace(" ", "").split(",") if t != ""]
    except ValueError:
        raise SystemExit(f"--tokens: expected comma-separated integers like 1,2,3, got '{text}'")


def _cmd_run(args) -> int:
    model = load_any(args.model)
    tokens = _parse_tokens(args.tokens)
    hooks = ablation_hooks(parse_ablations(args.ablate)) if args.ablate else None
    cache = forward_any(model, tokens, hooks=hooks)
    save_cache(args.output, cache_to_float32(cache, tokens))
    print(f"wrote {len(cache) + 1} arrays for {len(tokens)} tokens to {args.output}")
    return 0


def _cmd_lens(args) -> int:
    model = load_gpt2(args.model)
    tokens = _parse_tokens(args.tokens)
    lens = logit_lens(model, tokens)
    save_cache(args.output, {"lens.logprobs": lens.numpy().astype(np.float32),
                             "tokens": np.asarray(tokens, dtype=np.float32)})
    print(f"wrote lens.logprobs {list(lens.shape)} to {args.output}")
    return 0


def _parse_head(text: str) -> Tuple[int, int]:
    try:
        layer, head = (int(x) for x in text.split("."))
        return layer, head
    except ValueError:
        raise SystemExit(f"--head: expected LAYER.HEAD like 0.3, got '{text}'")


def _cmd_circuits(args) -> int:
    model = load_gpt2(args.model)
    layer, head = _parse_head(args.head)
    tokens = _parse_tokens(args.tokens) if args.tokens else []
    out = circuits(model, layer, head, tokens, args.top_k)
    text = json.dumps(out, indent=1)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        print(text)


def _metric_from_args(args) -> Metric:
    vector = None
    if args.vector:
        vector = tuple(float(x) for x in np.load(args.vector).reshape(-1))
    return Metric(args.metric, answer=args.answer_id, wrong=args.wrong_id, pos=args.pos, hook=args.hook,
                  vector=vector, head=args.head)


def _add_metric_args(p, metric_required: bool = True) -> None:
    p.add_argument("--metric", required=metric_required, choices=METRIC_KINDS)
    p.add_argument("--answer-id", type=int, help="the answer token (logit_diff; the token of logit and logprob)")
    p.add_argument("--wrong-id", type=int, help="the wrong token (logit_diff)")
    p.add_argument("--pos", type=int, help="the metric's position (default: the last)")
    p.add_argument("--hook", help="dot: the cache key, e.g. blocks.1.hook_resid_post")
    p.add_argument("--vector", help="dot: a .npy float32 [row width] file")
    p.add_argument("--head", type=int, help="dot: one head of a per-head key")


def _cmd_grad(args) -> int:
    model = load_any(args.model)
    tokens = _parse_tokens(args.tokens)
    m, grads = grad(model, tokens, _metric_from_args(args))
    if not args.output.endswith(".npz"):
        raise ValueError(f"output '{args.output}': grad writes .npz")
    np.savez(args.output, **grads_to_float32(m, grads, tokens))
    print(f"metric {m:.9g}; wrote {len(grads)} gradients to {args.output}")
    return 0


def _cmd_atp(args) -> int:
    model = load_any(args.model)
    r = atp(model, _parse_tokens(args.clean), _parse_tokens(args.corrupt), args.answer, args.wrong, args.what,
            args.method)
    out = dict(r, raw=r["raw"].tolist(), normalized=r["normalized"].tolist())
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(out, f)
    print(f"wrote the {args.method} estimate of the {args.what} sweep to {args.output}")
    return 0


def _cmd_attribute(args) -> int:
    model = load_any(args.model)
    r = attribute(model, _parse_tokens(args.tokens), _metric_from_args(args), args.method, args.steps)
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(r, f)
    print(f"completeness error {r['completeness_error']:.3g}; wrote {args.output}")
    return 0


def _cmd_patch(args) -> int:
    model = load_any(args.model)
    r = patching_sweep(model, _parse_tokens(args.clean), _parse_tokens(args.corrupt), args.answer, args.wrong,
                       args.what)
    out = {"what": args.what, "metric_clean": r["metric_clean"], "metric_corrupt": r["metric_corrupt"],
           "raw": r["raw"].tolist(), "normalized": r["normalized"].tolist()}
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(out, f)
    print(f"wrote the {args.what} sweep ({r['raw'].size} patched runs) to {args.output}")
    return 0


def _cmd_compare(args) -> int:
    ref = load_cache(args.reference)
    cand = load_cache(args.candidate)
    keys = None
    if args.keys:
        keys = [k for k in ref if any(re.fullmatch(pat, k) for pat in args.keys)]
    results = compare_caches(ref, cand, args.rtol, keys)
    width = max([len(r.key) for r in results] + [3])
    print(f"{'key':<{width}}  {'max_abs':>10}  {'max_rel':>10}  {'max|ref|':>10}  status")
    for r in results:
        status = "ok" if r.ok else "FAIL"
        print(f"{r.key:<{width}}  {r.max_abs:10.3e}  {r.max_rel:10.3e}  {r.scale:10.3e}  {status}"
              + (f"  ({r.note})" if r.note else ""))
    extra = sorted(set(cand) - set(ref), key=_natural_key) if keys is None else []
    if extra:
        print(f"note: {len(extra)} candidate keys not in the reference (not compared): {extra[:6]}")
    failed = [r for r in results if not r.ok]
    worst = max(results, key=lambda r: r.max_rel) if results else None
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed (rtol {args.rtol:g} relative to "
          f"each key's largest reference magnitude"
          + (f"; worst {worst.key} {worst.max_rel:.3e}" if worst else "") + ")")
    return 1 if failed or not results else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="float64 forward pass of a Hugging Face GPT-2, Llama, Qwen2/3, Gemma 2/3 or GPT-NeoX folder")
    run.add_argument("--model", required=True, help="folder with config.json and model.safetensors")
    run.add_argument("--tokens", required=True, help="comma-separated token ids, used exactly as given")
    run.add_argument("-o", "--output", required=True, help="OUT.npz or OUT.safetensors (float32)")
    run.add_argument("--ablate", help="heads to ablate, as headscope-cli run --ablate: 3.2,1.0:mean")
    run.set_defaults(func=_cmd_run)
    lens = sub.add_parser("lens", help="float64 logit lens: [n_layer + 1, pos, d_vocab] log-probs")
    lens.add_argument("--model", required=True, help="folder with config.json and model.safetensors")
    lens.add_argument("--tokens", required=True, help="comma-separated token ids, used exactly as given")
    lens.add_argument("-o", "--output", required=True, help="OUT.npz or OUT.safetensors (float32)")
    lens.set_defaults(func=_cmd_lens)
    circ = sub.add_parser("circuits", help="a head's QK / OV circuits, materialized in float64, as JSON")
    circ.add_argument("--model", required=True, help="folder with config.json and model.safetensors")
    circ.add_argument("--head", required=True, help="LAYER.HEAD, e.g. 1.3")
    circ.add_argument("--tokens", help="comma-separated token ids: adds qk_scores and the OV top tokens")
    circ.add_argument("--top-k", type=int, default=10, help="top tokens kept per OV row (default 10)")
    circ.add_argument("-o", "--output", help="OUT.json (default: stdout)")
    circ.set_defaults(func=_cmd_circuits)


    patch = sub.add_parser("patch", help="activation patching sweep, one full run per patched cell")
    patch.add_argument("--model", required=True)
    patch.add_argument("--clean", required=True, help="clean token ids, comma-separated")
    patch.add_argument("--corrupt", required=True, help="corrupted token ids (as many as --clean)")
    patch.add_argument("--answer", required=True, type=int, help="token id of the answer")
    patch.add_argument("--wrong", required=True, type=int, help="token id of the wrong answer")
    patch.add_argument("--what", required=True, choices=sorted(PATCH_SITES))
    patch.add_argument("-o", "--output", required=True, help="OUT.json")
    patch.set_defaults(func=_cmd_patch)
    g = sub.add_parser("grad", help="float64 autograd: the metric's gradient at every cache key (.npz)")
    g.add_argument("--model", required=True)
    g.add_argument("--tokens", required=True, help="comma-separated token ids, used exactly as given")
    _add_metric_args(g)
    g.add_argument("-o", "--output", required=True, help="OUT.npz: metric, tokens, KEY.grad (float32)")
    g.set_defaults(func=_cmd_grad)
    a = sub.add_parser("atp", help="attribution patching (atp) or AtP* with the QK fix (atp_qk), as JSON")
    a.add_argument("--model", required=True)
    a.add_argument("--clean", required=True, help="clean token ids, comma-separated")
    a.add_argument("--corrupt", required=True, help="corrupted token ids (as many as --clean)")
    a.add_argument("--answer", required=True, type=int, help="token id of the answer")
    a.add_argument("--wrong", required=True, type=int, help="token id of the wrong answer")
    a.add_argument("--what", required=True, choices=sorted(PATCH_SITES))
    a.add_argument("--method", default="atp", choices=("atp", "atp_qk"))
    a.add_argument("-o", "--output", required=True, help="OUT.json")
    a.set_defaults(func=_cmd_atp)
    at = sub.add_parser("attribute", help="input-token attributions: grad x input or integrated gradients")
    at.add_argument("--model", required=True)
    at.add_argument("--tokens", required=True, help="comma-separated token ids, used exactly as given")
    at.add_argument("--method", required=True, choices=ATTRIBUTE_METHODS)
    at.add_argument("--steps", type=int, default=32, help="integrated gradients' midpoint-rule steps (default 32)")
    _add_metric_args(at)
    at.add_argument("-o", "--output", required=True, help="OUT.json")
    at.set_defaults(func=_cmd_attribute)
    cmp_ = sub.add_parser("compare", help="compare two caches key by key",
                          description=compare_arrays.__doc__)
    cmp_.add_argument("--reference", required=True, help=".npz or .safetensors")
    cmp_.add_argument("--candidate", required=True, help=".npz or .safetensors")
    cmp_.add_argument("--rtol", type=float, default=1e-4,
                      help="largest allowed max|ref-cand| / max|ref| per key (default 1e-4)")
    cmp_.add_argument("--keys", nargs="*", help="only keys fully matching these regexes")
    cmp_.set_defaults(func=_cmd_compare)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (OSError, ValueError) as e:
        print(f"hsref: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
