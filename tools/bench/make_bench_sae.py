#!/usr/bin/env python3
"""A SAELens v6 SAE folder for benchmarks: random weights of a given shape at a given hook.

    make_bench_sae.py OUT_DIR [--d-in 768] [--d-sae 16384] [--hook blocks.6.hook_resid_pre] [--k 64]

The weights are random (seed 0), so the latents mean nothing; what a benchmark measures (the
encoder's product, the top-k selection, the decoder over the active latents) depends only on the
shapes and on how many latents fire, which TopK fixes at k per position (a trained SAE of this
width fires 30-100). Written as SAELens saves a TopK SAE: cfg.json (architecture "topk",
metadata.hook_name) and sae_weights.safetensors with W_enc [d_in, d_sae], W_dec [d_sae, d_in],
b_enc [d_sae], b_dec [d_in], float32.
"""
import argparse
import json
import os
import struct

import numpy as np


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--d-in", type=int, default=768)
    p.add_argument("--d-sae", type=int, default=16384)
    p.add_argument("--hook", default="blocks.6.hook_resid_pre")
    p.add_argument("--k", type=int, default=64)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    w_dec = rng.standard_normal((a.d_sae, a.d_in), dtype=np.float32)
    w_dec /= np.linalg.norm(w_dec, axis=1, keepdims=True)
    os.makedirs(a.out, exist_ok=True)
    write_safetensors(os.path.join(a.out, "sae_weights.safetensors"), {
        "W_enc": w_dec.T.copy(), "W_dec": w_dec,
        "b_enc": np.zeros(a.d_sae, np.float32), "b_dec": np.zeros(a.d_in, np.float32)})
    cfg = {"architecture": "topk", "d_in": a.d_in, "d_sae": a.d_sae, "dtype": "float32", "device": "cpu",
           "apply_b_dec_to_input": True, "normalize_activations": "none", "reshape_activations": "none",
           "k": a.k, "rescale_acts_by_decoder_norm": False,
           "metadata": {"sae_lens_version": "6.5.0", "hook_name": a.hook, "model_name": "benchmark (random weights)"}}
    with open(os.path.join(a.out, "cfg.json"), "w") as f:
        json.dump(cfg, f, indent=2)


if __name__ == "__main__":
    main()
