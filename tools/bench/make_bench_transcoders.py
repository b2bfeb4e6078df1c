#!/usr/bin/env python3
"""SAELens v6 JumpReLU transcoder folders for benchmarks: random weights, one per layer, reading
blocks.L.ln2.hook_normalized and writing blocks.L.hook_mlp_out.

    make_bench_transcoders.py OUT_DIR [--layers 12] [--d-model 768] [--d-sae 4096] [--threshold 2.4]

W_enc columns are random unit vectors, so on ln2's normalised input (zero mean, unit variance per
element, norm ~sqrt(d_model)) each pre-activation is about N(0, 1); a JumpReLU threshold t fires a
latent with probability P(|z| > t)/2, and t = 2.4 gives ~0.8%, about 34 of 4096 per position, inside
the 20-100 trained transcoders of this width fire. Decoder rows are random unit vectors scaled small
(the outputs mean nothing; a benchmark depends only on the shapes and how many latents fire).
"""
import argparse, json, os, sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from make_bench_sae import write_safetensors  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--d-sae", type=int, default=4096)
    p.add_argument("--threshold", type=float, default=2.4)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    for layer in range(a.layers):
        w_enc = rng.standard_normal((a.d_model, a.d_sae), dtype=np.float32)
        w_enc /= np.linalg.norm(w_enc, axis=0, keepdims=True)
        w_dec = rng.standard_normal((a.d_sae, a.d_model), dtype=np.float32) * np.float32(0.1 / np.sqrt(a.d_model))
        d = os.path.join(a.out, f"transcoder_{layer}")
        os.makedirs(d, exist_ok=True)
        write_safetensors(os.path.join(d, "sae_weights.safetensors"), {
            "W_enc": w_enc, "W_dec": w_dec, "b_enc": np.zeros(a.d_sae, np.float32),
            "b_dec": np.zeros(a.d_model, np.float32), "threshold": np.full(a.d_sae, a.threshold, np.float32)})
        cfg = {"architecture": "jumprelu_transcoder", "d_in": a.d_model, "d_out": a.d_model, "d_sae": a.d_sae,
               "dtype": "float32", "device": "cpu", "apply_b_dec_to_input": False,
               "normalize_activations": "none", "reshape_activations": "none",
               "metadata": {"sae_lens_version": "6.5.0", "hook_name": f"blocks.{layer}.ln2.hook_normalized",
                            "hook_name_out": f"blocks.{layer}.hook_mlp_out",
                            "model_name": "benchmark (random weights)"}}
        with open(os.path.join(d, "cfg.json"), "w") as f:
            json.dump(cfg, f, indent=2)


if __name__ == "__main__":
    main()
