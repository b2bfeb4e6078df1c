#!/usr/bin/python3
"""HeadScope's float64 reference for sparse autoencoders and transcoders (numpy only).

Written from the Python it stands in for, not from HeadScope's C++ (core/features/sae.cpp):
  SAELens 6   sae_lens/saes/sae.py (SAE.process_sae_in, _setup_activation_normalization),
              standard_sae.py, jumprelu_sae.py, topk_sae.py (TopK, TopKSAE), gated_sae.py,
              transcoder.py (Transcoder, SkipTranscoder, JumpReLUTranscoder),
              loading/pretrained_sae_loaders.py (handle_config_defaulting, handle_pre_6_0_config,
              read_sae_components_from_disk, the gemma_2 loaders)
  circuit-tracer  circuit_tracer/transcoder/single_layer_transcoder.py (SingleLayerTranscoder,
              load_transcoder, load_gemma_scope_transcoder, load_transcoder_set),
              activation_functions.py (JumpReLU, TopK), utils/hf_utils.py (load_transcoders,
              resolve_transcoder_paths)

    /usr/bin/python3 tools/reference/saeref.py run --sae DIR --x X.npy [--layer L] -o OUT.npz

writes feature_acts and sae_out (float32 of the float64 results) for input rows X [pos, d_in].
Every array here is float64 [pos, ...]; an SAE is a dict of float64 weights plus its settings.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import struct
import sys

import numpy as np

# ---------------------------------------------------------------- files


def read_safetensors(path: str) -> dict:
    """{name: float64 array} of an F32/F16/F64 safetensors file (BF16 too, widened by hand)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = data[base + b : base + e]
        dt = info["dtype"]
        if dt == "F32":
            a = np.frombuffer(raw, "<f4")
        elif dt == "F16":
            a = np.frombuffer(raw, "<f2")
        elif dt == "F64":
            a = np.frombuffer(raw, "<f8")
        elif dt == "BF16":
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view("<f4")
        elif dt in ("I64", "I32"):
            a = np.frombuffer(raw, "<i8" if dt == "I64" else "<i4")
        else:
            raise ValueError(f"{path}: {name} is {dt}")
        out[name] = a.astype(np.float64).reshape(info["shape"])
    return out


def write_safetensors(path: str, tensors: dict, metadata: dict | None = None) -> None:
    """F32 tensors (int64 for integer arrays), names in sorted order."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        if a.dtype.kind in "iu":
            raw, dt = a.astype("<i8").tobytes(), "I64"
        else:
            raw, dt = a.astype("<f4").tobytes(), "F32"
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---------------------------------------------------------------- SAELens configs


def saelens_config(cfg: dict) -> dict:
    """handle_config_defaulting: configs before 6.0.0-rc.0 (or without a version) are converted."""
    version = cfg.get("sae_lens_version") or (cfg.get("metadata") or {}).get("sae_lens_version")
    v6 = bool(version) and int(re.match(r"\d*", version).group(0) or 0) >= 6
    c = dict(cfg)
    meta = dict(cfg.get("metadata") or {})
    if not v6:
        # handle_pre_6_0_config
        ren = {"hook_point": "hook_name", "activation_fn_str": "activation_fn"}
        c = {ren.get(k, k): v for k, v in cfg.items()}
        c.setdefault("apply_b_dec_to_input", True)
        c.setdefault("activation_fn", "relu")
        c.setdefault("architecture", "standard")
        c.setdefault("reshape_activations", "hook_z" if "hook_z" in c.get("hook_name", "") else "none")
        if c.get("activation_fn") == "topk" and (c.get("activation_fn_kwargs") or {}).get("k") is not None:
            c["architecture"] = "topk"
            c["k"] = c["activation_fn_kwargs"]["k"]
        if isinstance(c.get("normalize_activations"), bool):
            c["normalize_activations"] = "expected_average_only_in" if c["normalize_activations"] else "none"
        for k in ("hook_name", "hook_name_out"):
            if k in c:
                meta[k] = c[k]
    if c.get("normalize_activations") is None:
        c["normalize_activations"] = "none"
    arch = c["architecture"]
    transcoder = "transcoder" in arch
    return {
        "architecture": arch,
        "d_in": c["d_in"],
        "d_sae": c["d_sae"],
        "d_out": c.get("d_out"),
        "hook_in": meta.get("hook_name") or c.get("hook_name"),
        "hook_out": (meta.get("hook_name_out") or c.get("hook_name_out")) if transcoder else None,
        "apply_b_dec_to_input": bool(c.get("apply_b_dec_to_input", not transcoder)) and not transcoder,
        "normalize_activations": c["normalize_activations"],
        "k": c.get("k", 100),
        "rescale_acts_by_decoder_norm": bool(c.get("rescale_acts_by_decoder_norm", False)) and arch == "topk",
        "source": "saelens",
    }


def load_folder(folder: str) -> list:
    """The SAEs of a folder: one for SAELens or Gemma Scope, one per layer for a transcoder set."""
    if os.path.exists(os.path.join(folder, "cfg.json")):
        with open(os.path.join(folder, "cfg.json")) as f:
            sae = saelens_config(json.load(f))
        st = os.path.join(folder, "sae_weights.safetensors")
        w = read_safetensors(st) if os.path.exists(st) else read_npz(os.path.join(folder, "params.npz"))
        if "scaling_factor" in w:
            assert np.allclose(w.pop("scaling_factor"), 1.0)
        if "log_threshold" in w and "threshold" not in w:
            w["threshold"] = np.exp(w.pop("log_threshold"))
        sae.update(w)
        return [sae]
    if os.path.exists(os.path.join(folder, "config.yaml")):
        return load_transcoder_set(folder)
    return [load_gemma_scope(folder)]


def read_npz(path: str) -> dict:
    with np.load(path) as z:
        return {("W_" + k[2:] if k.startswith("w_") else k): z[k].astype(np.float64) for k in z.files}


def load_gemma_scope(folder: str) -> dict:
    """get_gemma_2_config_from_hf / get_gemma_2_transcoder_config_from_hf, the hook from the names."""
    parts = os.path.abspath(folder).split(os.sep)
    layer = next(int(m.group(1)) for p in reversed(parts) if (m := re.fullmatch(r"layer_(\d+)", p)))
    repo = next(p for p in reversed(parts) if "gemma-scope" in p)
    w = read_npz(os.path.join(folder, "params.npz"))
    sae = {"d_in": w["W_enc"].shape[0], "d_sae": w["W_enc"].shape[1], "apply_b_dec_to_input": False,
           "normalize_activations": "none", "k": None, "rescale_acts_by_decoder_norm": False, "source": "saelens"}
    if "transcoders" in repo:
        sae.update(architecture="jumprelu_transcoder", hook_in=f"blocks.{layer}.ln2.hook_normalized",
                   hook_out=f"blocks.{layer}.hook_mlp_out")
    else:
        hook = {"res": "hook_resid_post", "mlp": "hook_mlp_out", "att": "attn.hook_z"}[
            next(k for k in ("res", "mlp", "att") if f"-{k}" in repo)]
        sae.update(architecture="jumprelu", hook_in=f"blocks.{layer}.{hook}", hook_out=None)
    sae.update(w)
    return sae


def load_transcoder_set(folder: str) -> list:
    import yaml

    with open(os.path.join(folder, "config.yaml")) as f:
        cfg = yaml.safe_load(f)
    if "transcoders" in cfg:
        items = cfg["transcoders"]
        if items and isinstance(items[0], dict):
            items = [t["filepath"] for t in sorted(items, key=lambda t: t["layer"])]
        paths = [os.path.join(folder, p) for p in items]
    else:
        found = {int(m.group(1)): os.path.join(folder, n)
                 for n in os.listdir(folder) if (m := re.fullmatch(r"layer_(\d+)\.safetensors", n))}
        paths = [found[i] for i in range(len(found))]
    out = []
    for layer, path in enumerate(paths):
        if path.endswith(".npz"):
            # load_gemma_scope_transcoder: W_enc [d_model, d_transcoder] transposed to circuit-tracer's.
            w = read_npz(path)
            w["W_enc"] = w["W_enc"].T
            w["activation_function.threshold"] = w.pop("threshold")
        else:
            w = read_safetensors(path)
        act = cfg.get("activation")
        t = {"source": "circuit-tracer", "layer": layer, "W_enc_ct": w["W_enc"], "W_dec": w["W_dec"],
             "b_enc": w["b_enc"], "b_dec": w["b_dec"], "W_skip": w.get("W_skip"),
             "hook_in": cfg["feature_input_hook"], "hook_out": cfg["feature_output_hook"]}
        if act == "topk":
            t.update(activation="topk", k=cfg["k"])
        elif act == "relu" or "activation_function.threshold" not in w:
            t.update(activation="relu")
        else:
            t.update(activation="jumprelu", threshold=w["activation_function.threshold"])
        out.append(t)
    return out


# ---------------------------------------------------------------- SAELens encode / decode


def norm_in(sae: dict, x: np.ndarray):
    """SAE._setup_activation_normalization's run_time_activation_norm_fn_in; returns (x', state)."""
    mode = sae["normalize_activations"]
    if mode == "constant_norm_rescale":
        coeff = np.sqrt(sae["d_in"]) / np.linalg.norm(x, axis=-1, keepdims=True)
        return x * coeff, ("coeff", coeff)
    if mode == "layer_norm":
        mu = x.mean(-1, keepdims=True)
        xc = x - mu
        std = xc.std(-1, keepdims=True, ddof=1)  # torch's Tensor.std is unbiased
        return xc / (std + 1e-5), ("ln", mu, std)
    if mode in ("none", "expected_average_only_in"):
        return x, ("none",)
    raise ValueError(mode)


def norm_out(state, y: np.ndarray) -> np.ndarray:
    if state[0] == "coeff":
        return y / state[1]
    if state[0] == "ln":
        return y * state[2] + state[1]
    return y


def saelens_encode(sae: dict, x: np.ndarray) -> np.ndarray:
    arch = sae["architecture"]
    transcoder = "transcoder" in arch
    xn, _ = norm_in(sae, x)
    # SAE.process_sae_in subtracts b_dec * apply_b_dec_to_input; Transcoder.process_sae_in does not.
    sae_in = xn if transcoder else xn - sae["b_dec"] * float(sae["apply_b_dec_to_input"])
    if arch == "gated":
        gate = (sae_in @ sae["W_enc"] + sae["b_gate"]) > 0
        mag = np.maximum(sae_in @ (sae["W_enc"] * np.exp(sae["r_mag"])) + sae["b_mag"], 0)
        return gate * mag
    hidden_pre = sae_in @ sae["W_enc"] + sae["b_enc"]
    if arch in ("standard", "transcoder", "skip_transcoder"):
        return np.maximum(hidden_pre, 0)
    if arch in ("jumprelu", "jumprelu_transcoder"):
        return np.maximum(hidden_pre, 0) * (hidden_pre > sae["threshold"])
    if arch == "topk":
        if sae["rescale_acts_by_decoder_norm"]:
            hidden_pre = hidden_pre * np.linalg.norm(sae["W_dec"], axis=-1)
        return topk(hidden_pre, sae["k"], relu=True)
    raise ValueError(arch)


def topk(x: np.ndarray, k: int, relu: bool) -> np.ndarray:
    """SAELens TopK.forward (relu=True: topk_values.relu()); circuit-tracer TopK (x * gate)."""
    out = np.zeros_like(x)
    for p in range(x.shape[0]):
        idx = np.argsort(-x[p], kind="stable")[:k]
        out[p, idx] = np.maximum(x[p, idx], 0) if relu else x[p, idx]
    return out


def saelens_decode(sae: dict, acts: np.ndarray, x: np.ndarray) -> np.ndarray:
    arch = sae["architecture"]
    if arch == "topk" and sae["rescale_acts_by_decoder_norm"]:
        acts = acts / np.linalg.norm(sae["W_dec"], axis=-1)
    out = acts @ sae["W_dec"] + sae["b_dec"]
    if "transcoder" in arch:
        # Transcoder.decode: no run_time_activation_norm_fn_out. SkipTranscoder.forward adds
        # x @ W_skip.T with x as given.
        if arch == "skip_transcoder":
            out = out + x @ sae["W_skip"].T
        return out
    _, state = norm_in(sae, x)
    return norm_out(state, out)


# ---------------------------------------------------------------- circuit-tracer


def ct_encode(t: dict, x: np.ndarray) -> np.ndarray:
    pre = x @ t["W_enc_ct"].T + t["b_enc"]  # F.linear(input_acts, W_enc, b_enc), W_enc [d_transcoder, d_model]
    if t["activation"] == "relu":
        return np.maximum(pre, 0)
    if t["activation"] == "jumprelu":
        return pre * (pre > t["threshold"])  # jumprelu.forward: x * (x > threshold), no ReLU
    return topk(pre, t["k"], relu=False)


def ct_decode(t: dict, acts: np.ndarray, x: np.ndarray) -> np.ndarray:
    out = acts @ t["W_dec"] + t["b_dec"]
    if t["W_skip"] is not None:
        out = out + x @ t["W_skip"].T
    return out


def run(sae: dict, x: np.ndarray):
    """(feature_acts, sae_out) in float64 for rows x [pos, d_in]."""
    x = np.asarray(x, np.float64)
    if sae["source"] == "circuit-tracer":
        a = ct_encode(sae, x)
        return a, ct_decode(sae, a, x)
    a = saelens_encode(sae, x)
    return a, saelens_decode(sae, a, x)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--sae", required=True)
    r.add_argument("--x", required=True, help=".npy of input rows [pos, d_in]")
    r.add_argument("--layer", type=int, default=0)
    r.add_argument("-o", required=True)
    args = ap.parse_args()
    saes = load_folder(args.sae)
    sae = saes[args.layer if len(saes) > 1 else 0]
    acts, out = run(sae, np.load(args.x))
    np.savez(args.o, feature_acts=acts.astype(np.float32), sae_out=out.astype(np.float32))
    return 0


if __name__ == "__main__":
    sys.exit(main())
