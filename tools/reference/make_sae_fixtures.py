#!/usr/bin/python3
"""Writes tests/fixtures/sae: one small SAE or transcoder folder per architecture and config
variant, in the files SAELens, circuit-tracer and Gemma Scope write, each with reference.npz
(input rows x and the float64 reference's feature_acts and sae_out, stored as float32; for a
transcoder set x_layer{i}, feature_acts_layer{i}, sae_out_layer{i}).

    /usr/bin/python3 tools/reference/make_sae_fixtures.py [--out tests/fixtures/sae]

Fixed seed; the sizes fit tests/fixtures/models/llama_gqa (d_model 32, 4 heads of 8, 2 layers,
RMSNorm), so every fixture also fits a real model. Inputs are redrawn until no pre-activation is
within 1e-3 of a decision (ReLU's 0, a JumpReLU threshold, a gate, the k-th/(k+1)-th gap of TopK),
so float32 and float64 pick the same latents.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import saeref  # noqa: E402

D = 32        # d_in = d_out = d_model of llama_gqa (and n_heads * d_head for hook_z)
POS = 6
MARGIN = 1e-3
rng = np.random.default_rng(20250611)


def f32(a):
    return np.asarray(a, np.float32)


def weights(d_in, d_sae, d_out, *, b_enc_mean=0.0):
    return {
        "W_enc": f32(rng.normal(0, 1 / np.sqrt(d_in), (d_in, d_sae))),
        "W_dec": f32(rng.normal(0, 1 / np.sqrt(d_sae / 4), (d_sae, d_out))),
        "b_enc": f32(rng.normal(b_enc_mean, 0.3, d_sae)),
        "b_dec": f32(rng.normal(0, 0.2, d_out)),
    }


def margins(sae, x):
    """The smallest distance of any pre-activation to a decision, per row."""
    x = np.asarray(x, np.float64)
    w = {k: np.asarray(v, np.float64) if isinstance(v, np.ndarray) else v for k, v in sae.items()}
    if sae["source"] == "circuit-tracer":
        pre = x @ w["W_enc_ct"].T + w["b_enc"]
        if sae["activation"] == "jumprelu":
            return np.abs(pre - w["threshold"]).min(-1)
        if sae["activation"] == "topk":
            s = -np.sort(-pre, -1)
            return s[:, sae["k"] - 1] - s[:, sae["k"]]
        return np.abs(pre).min(-1)
    xn, _ = saeref.norm_in(w, x)
    arch = sae["architecture"]
    sae_in = xn if "transcoder" in arch else xn - w["b_dec"] * float(w["apply_b_dec_to_input"])
    if arch == "gated":
        pre = sae_in @ w["W_enc"]
        return np.minimum(np.abs(pre + w["b_gate"]).min(-1), np.abs(pre * np.exp(w["r_mag"]) + w["b_mag"]).min(-1))
    pre = sae_in @ w["W_enc"] + w["b_enc"]
    m = np.abs(pre).min(-1)
    if "threshold" in w and arch != "topk":
        m = np.minimum(m, np.abs(pre - w["threshold"]).min(-1))
    if arch == "topk":
        if w["rescale_acts_by_decoder_norm"]:
            pre = pre * np.linalg.norm(w["W_dec"], axis=-1)
        s = -np.sort(-pre, -1)
        m = np.minimum(s[:, sae["k"] - 1] - s[:, sae["k"]], np.abs(s[:, : sae["k"]]).min(-1))
    return m


def draw_x(sae, d_in, scale=1.0, shift=0.0):
    rows = []
    while len(rows) < POS:
        row = f32(shift + scale * rng.normal(0, 1, (1, d_in)))
        if margins(sae, row)[0] > MARGIN * max(1.0, scale):
            rows.append(row[0])
    return np.stack(rows)


def write_reference(folder, arrays):
    np.savez(os.path.join(folder, "reference.npz"), **{k: f32(v) for k, v in arrays.items()})


# ---------------------------------------------------------------- SAELens


def saelens_case(out, name, cfg, w, *, x_scale=1.0, x_shift=0.0, weights_file="sae_weights.safetensors"):
    folder = os.path.join(out, name)
    os.makedirs(folder)
    with open(os.path.join(folder, "cfg.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    if weights_file.endswith(".npz"):
        np.savez(os.path.join(folder, weights_file), **w)
    else:
        saeref.write_safetensors(os.path.join(folder, weights_file), w)
    (sae,) = saeref.load_folder(folder)  # read back from the files, as HeadScope will
    x = draw_x(sae, cfg["d_in"], x_scale, x_shift)
    acts, sae_out = saeref.run(sae, x)
    write_reference(folder, {"x": x, "feature_acts": acts, "sae_out": sae_out})
    return acts


def v6(arch, hook, d_sae, **extra):
    meta = {"sae_lens_version": "6.5.1", "hook_name": hook, "model_name": "llama_gqa"}
    if "hook_name_out" in extra:
        meta["hook_name_out"] = extra.pop("hook_name_out")
    cfg = {"architecture": arch, "d_in": D, "d_sae": d_sae, "dtype": "float32", "device": "cpu",
           "apply_b_dec_to_input": True, "normalize_activations": "none", "reshape_activations": "none",
           "metadata": meta}
    cfg.update(extra)
    return cfg


def make_saelens(out):
    saelens_case(out, "standard", v6("standard", "blocks.1.hook_resid_pre", 64), weights(D, 64, D))
    saelens_case(out, "standard_no_b_dec_to_input",
                 v6("standard", "blocks.0.hook_resid_post", 48, apply_b_dec_to_input=False), weights(D, 48, D))
    saelens_case(out, "constant_norm_rescale",
                 v6("standard", "blocks.1.hook_resid_mid", 48, normalize_activations="constant_norm_rescale"),
                 weights(D, 48, D), x_scale=5.0)
    saelens_case(out, "layer_norm", v6("standard", "blocks.0.hook_resid_pre", 48, normalize_activations="layer_norm"),
                 weights(D, 48, D), x_scale=2.0, x_shift=3.0)
    saelens_case(out, "expected_average_only_in",
                 v6("standard", "blocks.1.hook_mlp_out", 48, normalize_activations="expected_average_only_in"),
                 weights(D, 48, D))
    w = weights(D, 64, D)
    w["threshold"] = f32(rng.uniform(0.05, 0.6, 64))
    saelens_case(out, "jumprelu", v6("jumprelu", "blocks.0.hook_resid_post", 64), w)
    saelens_case(out, "topk", v6("topk", "blocks.1.hook_resid_pre", 64, k=8), weights(D, 64, D, b_enc_mean=-1.2))
    w = weights(D, 48, D, b_enc_mean=-0.8)
    w["W_dec"] = f32(w["W_dec"] * rng.uniform(0.3, 3.0, (48, 1)))  # unequal decoder norms
    saelens_case(out, "topk_rescale",
                 v6("topk", "blocks.1.hook_attn_out", 48, k=6, rescale_acts_by_decoder_norm=True), w)
    w = weights(D, 48, D)
    del w["b_enc"]
    w.update(b_gate=f32(rng.normal(0, 0.3, 48)), r_mag=f32(rng.normal(0, 0.3, 48)), b_mag=f32(rng.normal(0, 0.3, 48)))
    saelens_case(out, "gated", v6("gated", "blocks.0.hook_resid_mid", 48), w)
    # Transcoders: apply_b_dec_to_input false (TranscoderConfig refuses true). The first also
    # normalises its input with layer_norm, which Transcoder.decode does not undo.
    saelens_case(out, "transcoder",
                 v6("transcoder", "blocks.0.ln2.hook_normalized", 64, d_out=D, apply_b_dec_to_input=False,
                    normalize_activations="layer_norm", hook_name_out="blocks.0.hook_mlp_out"),
                 weights(D, 64, D), x_scale=2.0, x_shift=1.0)
    w = weights(D, 48, D)
    w["W_skip"] = f32(rng.normal(0, 0.1, (D, D)))
    saelens_case(out, "skip_transcoder",
                 v6("skip_transcoder", "blocks.1.ln2.hook_normalized", 48, d_out=D, apply_b_dec_to_input=False,
                    hook_name_out="blocks.1.hook_mlp_out"), w)
    w = weights(D, 48, D)
    w["threshold"] = f32(rng.uniform(0.05, 0.5, 48))
    # mwhanna's transcoders name the MLP's input mlp.hook_in (circuit-tracer's ReplacementMLP).
    saelens_case(out, "jumprelu_transcoder",
                 v6("jumprelu_transcoder", "blocks.1.mlp.hook_in", 48, d_out=D, apply_b_dec_to_input=False,
                    hook_name_out="blocks.1.hook_mlp_out"), w)
    saelens_case(out, "hook_z", v6("standard", "blocks.1.attn.hook_z", 48, reshape_activations="hook_z"),
                 weights(D, 48, D))
    # A pre-6.0 config: no sae_lens_version, hook_point at the top level, activation_fn_str,
    # boolean normalize_activations, and a scaling_factor of ones (dropped by SAELens).
    legacy = {"model_name": "llama_gqa", "hook_point": "blocks.0.hook_resid_pre", "hook_point_layer": 0,
              "d_in": D, "d_sae": 48, "activation_fn_str": "relu", "normalize_activations": False,
              "dtype": "float32", "device": "cpu", "sae_lens_training_version": "3.13.0"}
    w = weights(D, 48, D)
    w["scaling_factor"] = np.ones(48, np.float32)
    saelens_case(out, "legacy", legacy, w)
    legacy_topk = {"hook_name": "blocks.1.hook_resid_post", "d_in": D, "d_sae": 64, "activation_fn": "topk",
                   "activation_fn_kwargs": {"k": 6}, "apply_b_dec_to_input": False, "sae_lens_version": "5.9.1"}
    saelens_case(out, "legacy_topk", legacy_topk, weights(D, 64, D, b_enc_mean=-1.0))


# ---------------------------------------------------------------- circuit-tracer


def ct_weights(d_model, d_t, *, skip, threshold=None, b_enc_mean=0.0, k=None):
    w = weights(d_model, d_t, d_model, b_enc_mean=b_enc_mean)
    w["W_enc"] = f32(w["W_enc"].T)  # [d_transcoder, d_model]
    if skip:
        w["W_skip"] = f32(rng.normal(0, 0.1, (d_model, d_model)))
    if threshold is not None:
        w["activation_function.threshold"] = threshold
    if k is not None:
        w["k"] = np.array(k, np.int64)  # SingleLayerTranscoder.to_safetensors
    return w


def ct_case(out, name, config_yaml, files):
    """files: {relative path: weights}. The reference reads the folder back."""
    folder = os.path.join(out, name)
    os.makedirs(folder)
    with open(os.path.join(folder, "config.yaml"), "w") as f:
        f.write(config_yaml)
    for rel, w in files.items():
        os.makedirs(os.path.dirname(os.path.join(folder, rel)), exist_ok=True)
        saeref.write_safetensors(os.path.join(folder, rel), w)
    arrays = {}
    for t in saeref.load_folder(folder):
        x = draw_x(t, D, 1.0)
        acts, sae_out = saeref.run(t, x)
        i = t["layer"]
        arrays.update({f"x_layer{i}": x, f"feature_acts_layer{i}": acts, f"sae_out_layer{i}": sae_out})
    write_reference(folder, arrays)


def make_circuit_tracer(out):
    # config.yaml beside layer_{i}.safetensors; JumpReLU from the files' thresholds (some negative:
    # circuit-tracer applies no ReLU, so negative values above them stay); W_skip on layer 1.
    ct_case(out, "ct_layer_files",
            "model_name: \"llama_gqa\"\nmodel_kind: transcoder_set\nfeature_input_hook: \"ln2.hook_normalized\"\n"
            "feature_output_hook: \"hook_mlp_out\"\nscan: \"headscope/fixture\"\n",
            {f"layer_{i}.safetensors": ct_weights(D, 64, skip=i == 1, threshold=f32(rng.normal(0, 0.5, 64)))
             for i in range(2)})
    # A transcoders list of files in a subfolder, TopK (no ReLU after it: b_enc pushes some kept
    # values below 0), mlp.hook_in / mlp.hook_out, W_skip on layer 0, k also stored in a file.
    ct_case(out, "ct_list_topk",
            "model_name: llama_gqa\nmodel_kind: transcoder_set\nfeature_input_hook: mlp.hook_in\n"
            "feature_output_hook: mlp.hook_out\nactivation: topk\nk: 8\ntranscoders:\n"
            "  - weights/tc_0.safetensors\n  - weights/tc_1.safetensors\n",
            {"weights/tc_0.safetensors": ct_weights(D, 48, skip=True, b_enc_mean=-1.2, k=8),
             "weights/tc_1.safetensors": ct_weights(D, 48, skip=False, b_enc_mean=-1.2)})
    # circuit-tracer's first configs: a list of {id, layer, filepath} (out of order here), ReLU.
    ct_case(out, "ct_legacy_list_relu",
            "model_name: llama_gqa\nfeature_input_hook: hook_resid_mid\nfeature_output_hook: hook_mlp_out\n"
            "activation: relu\ntranscoders:\n"
            "  - id: tc-1\n    layer: 1\n    filepath: relu_1.safetensors\n"
            "  - id: tc-0\n    layer: 0\n    filepath: relu_0.safetensors\n",
            {f"relu_{i}.safetensors": ct_weights(D, 48, skip=False) for i in range(2)})


# ---------------------------------------------------------------- Gemma Scope


def make_gemma_scope(out):
    folder = os.path.join(out, "gemma_scope", "gemma-scope-tiny-pt-res", "layer_1", "width_48")
    os.makedirs(folder)
    w = weights(D, 48, D)
    w["threshold"] = f32(rng.uniform(0.05, 0.6, 48))
    np.savez(os.path.join(folder, "params.npz"), **w)
    sae = saeref.load_folder(folder)[0]
    x = draw_x(sae, D)
    acts, sae_out = saeref.run(sae, x)
    write_reference(folder, {"x": x, "feature_acts": acts, "sae_out": sae_out})


README = """# SAE and transcoder fixtures

Made by `/usr/bin/python3 tools/reference/make_sae_fixtures.py` (fixed seed; rerunning it writes
the same files). Each folder is an SAE or transcoder set in the files its library writes, plus
`reference.npz`: input rows `x` [pos, d_in] and what `tools/reference/saeref.py` (float64 numpy,
written from SAELens 6's and circuit-tracer's code) computes from them: `feature_acts` [pos, d_sae]
and `sae_out` [pos, d_out], stored as float32. Transcoder sets hold `x_layer{i}`,
`feature_acts_layer{i}`, `sae_out_layer{i}` per layer. `tests/core/test_sae.cpp` compares HeadScope
with them: max |reference - ours| / max |reference| at most 1e-4 per array.

All sizes fit `tests/fixtures/models/llama_gqa` (d_model 32, 4 heads of d_head 8, 2 layers).
Inputs are redrawn until no pre-activation lies within 1e-3 of a decision (0 for a ReLU, a
JumpReLU threshold, a gate, the gap between the k-th and (k+1)-th largest for TopK).

| folder | format | what it covers |
|---|---|---|
| standard | SAELens v6 | ReLU, apply_b_dec_to_input |
| standard_no_b_dec_to_input | SAELens v6 | apply_b_dec_to_input false |
| constant_norm_rescale | SAELens v6 | x * sqrt(d_in)/|x| in, divided out |
| layer_norm | SAELens v6 | (x - mean)/(unbiased std + 1e-5) in, * std + mean out |
| expected_average_only_in | SAELens v6 | identity at inference |
| jumprelu | SAELens v6 | relu(pre) * (pre > threshold) |
| topk | SAELens v6 | k = 8, ReLU on the kept values (some negative, so zeroed) |
| topk_rescale | SAELens v6 | rescale_acts_by_decoder_norm, unequal decoder norms |
| gated | SAELens v6 | b_gate, r_mag, b_mag |
| transcoder | SAELens v6 | ln2.hook_normalized -> hook_mlp_out, layer_norm in but not out |
| skip_transcoder | SAELens v6 | + x @ W_skip^T |
| jumprelu_transcoder | SAELens v6 | hook named mlp.hook_in |
| hook_z | SAELens v6 | attn.hook_z flattened to n_heads * d_head |
| legacy | SAELens pre-6.0 | hook_point, activation_fn_str, boolean normalize_activations, scaling_factor of ones |
| legacy_topk | SAELens pre-6.0 | activation_fn topk with activation_fn_kwargs.k |
| ct_layer_files | circuit-tracer | config.yaml + layer_{i}.safetensors, JumpReLU without ReLU, W_skip on layer 1 |
| ct_list_topk | circuit-tracer | transcoders list in a subfolder, TopK without ReLU, mlp.hook_in/out, k tensor |
| ct_legacy_list_relu | circuit-tracer | list of {id, layer, filepath}, activation relu |
| gemma_scope/gemma-scope-tiny-pt-res/layer_1/width_48 | Gemma Scope params.npz | hook from the folder names |
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--out", default=os.path.join(repo, "tests", "fixtures", "sae"))
    args = ap.parse_args()
    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    make_saelens(args.out)
    make_circuit_tracer(args.out)
    make_gemma_scope(args.out)
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(README)
    return 0


if __name__ == "__main__":
    sys.exit(main())
