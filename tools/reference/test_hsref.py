#!/usr/bin/python3
"""Checks of the reference itself: /usr/bin/python3 -m unittest discover -s tools/reference -v

The reference is only worth something if it is right, so: the safetensors codec against torch's
own conversions, the forward pass against the identities DESIGN.md promises, and the committed
fixtures against a fresh regeneration.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import hsref  # noqa: E402

FIXTURES = os.path.join(REPO, "tests", "fixtures", "models")
TINY_RANDOM = os.path.join(os.path.dirname(REPO), "shared", "models", "tiny-random-gpt2")


class SafetensorsTest(unittest.TestCase):
    def test_bf16_rounding_matches_torch(self):
        rng = np.random.default_rng(0)
        x = np.concatenate([rng.standard_normal(10000).astype(np.float32) * 10.0 ** rng.integers(-8, 8, 10000),
                            np.array([0.0, -0.0, np.inf, -np.inf, 3.4e38, 1e-40], dtype=np.float32)])
        # exact ties: the low half is 0x8000, half of them with an odd top half
        ties = (rng.integers(0x3F80, 0x4000, 1000, dtype=np.uint32) << 16 | 0x8000).view(np.float32)
        x = np.concatenate([x, ties])
        ours = hsref.f32_to_bf16_bits(x)
        theirs = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        np.testing.assert_array_equal(ours, theirs)
        back = hsref.bf16_bits_to_f32(ours)
        np.testing.assert_array_equal(back, torch.from_numpy(x).to(torch.bfloat16).float().numpy())

    def test_round_trip_and_layout(self):
        rng = np.random.default_rng(1)
        tensors = {"h.10.w": rng.standard_normal((3, 5)), "h.2.w": rng.standard_normal((7,)),
                   "scalar": np.array(2.5), "ids": np.arange(6, dtype=np.int64).reshape(2, 3)}
        with tempfile.TemporaryDirectory() as d:
            for dtype, np_dtype in (("F32", np.float32), ("F16", np.float16), ("BF16", None)):
                path = os.path.join(d, f"{dtype}.safetensors")
                hsref.write_safetensors(path, tensors, dtypes=dtype, metadata={"format": "pt"})
                header, data_start = hsref.read_safetensors_header(path)
                self.assertEqual(data_start % 8, 0)
                self.assertEqual(header["__metadata__"], {"format": "pt"})
                self.assertEqual(header["ids"]["dtype"], "I64")
                names = [k for k in header if k != "__metadata__"]
                self.assertEqual(names, sorted(names))
                back, dtypes, _ = hsref.read_safetensors(path, with_dtypes=True)
                np.testing.assert_array_equal(back["ids"], tensors["ids"])
                self.assertEqual(back["scalar"].shape, ())
                for name in ("h.10.w", "h.2.w", "scalar"):
                    self.assertEqual(dtypes[name], dtype)
                    want = (tensors[name].astype(np_dtype) if np_dtype is not None else
                            torch.from_numpy(tensors[name]).to(torch.bfloat16).double().numpy())
                    np.testing.assert_array_equal(back[name].astype(np.float64), want.astype(np.float64))

    def test_truncated_file_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "x.safetensors")
            hsref.write_safetensors(path, {"a": np.ones((4, 4))})
            with open(path, "rb") as f:
                data = f.read()
            with open(path, "wb") as f:
                f.write(data[:-4])
            with self.assertRaises(hsref.SafetensorsError):
                hsref.read_safetensors(path)


class CompareTest(unittest.TestCase):
    def test_masked_and_relative(self):
        ref = np.array([[1.0, -np.inf], [2.0, -4.0]], dtype=np.float32)
        self.assertTrue(hsref.compare_arrays("k", ref, ref, 1e-4).ok)
        near = ref + np.array([[0, 0], [0, 3e-4]], dtype=np.float32)  # 3e-4 / max|ref| 4 = 7.5e-5
        r = hsref.compare_arrays("k", ref, near, 1e-4)
        self.assertTrue(r.ok)
        self.assertAlmostEqual(r.max_rel, 7.5e-5, delta=1e-6)
        unmasked = ref.copy()
        unmasked[0, 1] = -1e9  # a finite "masked" value is not -inf
        self.assertFalse(hsref.compare_arrays("k", ref, unmasked, 1e-4).ok)
        nan = ref.copy()
        nan[1, 0] = np.nan
        self.assertFalse(hsref.compare_arrays("k", ref, nan, 1e-4).ok)
        self.assertFalse(hsref.compare_arrays("k", ref, ref[:1], 1e-4).ok)


class ForwardTest(unittest.TestCase):
    def check_identities(self, model, tokens):
        cache = hsref.forward(model, tokens)
        c = model.config
        self.assertEqual(sorted(cache), sorted(hsref.cache_keys(c.n_layer)))
        n = len(tokens)
        resid = cache["hook_embed"] + cache["hook_pos_embed"]
        for l in range(c.n_layer):
            b = f"blocks.{l}."
            pattern = cache[b + "attn.hook_pattern"]
            self.assertEqual(tuple(pattern.shape), (c.n_head, n, n))
            torch.testing.assert_close(pattern.sum(-1), torch.ones(c.n_head, n, dtype=torch.float64))
            self.assertTrue(bool((pattern.triu(1) == 0).all()))
            scores = cache[b + "attn.hook_attn_scores"]
            above = ~torch.ones(n, n, dtype=torch.bool).tril()
            self.assertTrue(bool(torch.isneginf(scores[:, above]).all()))
            self.assertTrue(bool(torch.isfinite(scores[:, ~above]).all()))
            # concat-then-project (hook_attn_out) equals project-each-head-then-sum
            b_o = torch.from_numpy(model.weights[f"h.{l}.attn.c_proj.bias"].astype(np.float64))
            torch.testing.assert_close(cache[b + "attn.hook_result"].sum(1) + b_o, cache[b + "hook_attn_out"])
            self.assertEqual(tuple(cache[b + "attn.hook_result"].shape), (n, c.n_head, c.d_model))
            self.assertEqual(tuple(cache[b + "mlp.hook_post"].shape), (n, c.d_mlp))
            resid = resid + cache[b + "hook_attn_out"] + cache[b + "hook_mlp_out"]
            torch.testing.assert_close(resid, cache[b + "hook_resid_post"])
        self.assertEqual(tuple(cache["logits"].shape), (n, c.d_vocab))

    def test_fixtures_identities(self):
        for name in sorted(os.listdir(FIXTURES)):
            folder = os.path.join(FIXTURES, name)
            if not isinstance(hsref.load_any(folder), hsref.GPT2Model):
                continue  # RotaryReferenceTest
            with self.subTest(name):
                with open(os.path.join(folder, "fixture.json")) as f:
                    tokens = json.load(f)["tokens"]
                self.check_identities(hsref.load_gpt2(folder), tokens)

    @unittest.skipUnless(os.path.isdir(TINY_RANDOM), "shared/models/tiny-random-gpt2 absent")
    def test_real_hugging_face_file(self):
        model = hsref.load_gpt2(TINY_RANDOM)
        self.assertTrue(model.lm_head_tied)
        self.assertEqual(model.config.d_mlp, 128)
        self.check_identities(model, [98, 5, 17, 300, 999])

    def test_bad_tokens(self):
        model = hsref.load_gpt2(os.path.join(FIXTURES, "full_context"))
        with self.assertRaises(ValueError):
            hsref.forward(model, list(range(17)))   # n_positions is 16
        with self.assertRaises(ValueError):
            hsref.forward(model, [291])             # vocab is 291


class RotaryReferenceTest(unittest.TestCase):
    """The Llama-family reference against identities that hold whatever the weights."""

    def test_rotary_identities(self):
        torch.manual_seed(0)
        x = torch.randn(9, 3, 8, dtype=torch.float64)
        inv = hsref.rope_inv_freq(8, 100.0, None)
        rot = hsref.apply_rotary(x, inv)
        # position 0 is not turned; every pair keeps its length
        torch.testing.assert_close(rot[0], x[0])
        pairs = lambda t: t[..., :4] ** 2 + t[..., 4:] ** 2  # noqa: E731
        torch.testing.assert_close(pairs(rot), pairs(x))
        # the score of two rotated vectors depends only on their distance
        q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
        at = lambda v, p: hsref.apply_rotary(v.expand(p + 1, 1, 8), inv)[p, 0]  # noqa: E731
        self.assertAlmostEqual(float(at(q, 5) @ at(k, 3)), float(at(q, 2) @ at(k, 0)), places=12)
        # interleaved pairs (2i, 2i+1) are rotate-half pairs (i, i+4) after permuting each head
        perm = [0, 2, 4, 6, 1, 3, 5, 7]
        inter = hsref.apply_rotary(x, inv, pairs="interleaved")
        torch.testing.assert_close(inter[..., perm], hsref.apply_rotary(x[..., perm], inv))
        # partial rotary: the dimensions past 2 * len(inv_freq) pass unchanged
        part = hsref.apply_rotary(x, hsref.rope_inv_freq(4, 100.0, None))
        torch.testing.assert_close(part[..., 4:], x[..., 4:])

    def test_rotary_fixtures_identities(self):
        for name in sorted(os.listdir(FIXTURES)):
            folder = os.path.join(FIXTURES, name)
            model = hsref.load_any(folder)
            if not isinstance(model, hsref.LlamaModel):
                continue
            with self.subTest(name):
                with open(os.path.join(folder, "fixture.json")) as f:
                    tokens = json.load(f)["tokens"]
                c = model.config
                cache = hsref.llama_forward(model, tokens)
                self.assertEqual(list(cache), hsref.llama_cache_keys(c))
                resid = cache["hook_embed"]
                for l in range(c.n_layer):
                    b = f"blocks.{l}."
                    torch.testing.assert_close(cache[b + "attn.hook_pattern"].sum(-1),
                                               torch.ones(c.n_head, len(tokens), dtype=torch.float64))
                    o_bias = model.weights.get(f"layers.{l}.self_attn.o_proj.bias")
                    b_o = torch.from_numpy(o_bias.astype(np.float64)) if o_bias is not None else 0.0
                    torch.testing.assert_close(cache[b + "attn.hook_result"].sum(1) + b_o, cache[b + "hook_attn_out"])
                    self.assertEqual(tuple(cache[b + "attn.hook_k"].shape), (len(tokens), c.n_kv, c.d_head))
                    resid = resid + cache[b + "hook_attn_out"] + cache[b + "hook_mlp_out"]
                    torch.testing.assert_close(resid, cache[b + "hook_resid_post"])
                    # the position-0 query is not rotated
                    torch.testing.assert_close(cache[b + "attn.hook_rot_q"][0], cache[b + "attn.hook_q"][0])


class FixturesUpToDateTest(unittest.TestCase):
    def test_regeneration_is_byte_identical(self):
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([sys.executable, os.path.join(REPO, "tests", "fixtures", "make_fixtures.py"),
                            "--out", d], check=True, stdout=subprocess.DEVNULL)
            for name in sorted(os.listdir(FIXTURES)):
                for file in sorted(os.listdir(os.path.join(FIXTURES, name))):
                    with self.subTest(f"{name}/{file}"):
                        with open(os.path.join(FIXTURES, name, file), "rb") as a, \
                                open(os.path.join(d, name, file), "rb") as b:
                            self.assertEqual(a.read(), b.read())


class AnalysesTest(unittest.TestCase):
    """The logit lens and circuits of the reference, against the identities they rest on."""

    def test_lens_last_stream_is_the_runs_log_softmax(self):
        model = hsref.load_gpt2(os.path.join(FIXTURES, "f16_plain"))
        tokens = [54, 257, 264, 220, 266]
        lens = hsref.logit_lens(model, tokens)
        self.assertEqual(tuple(lens.shape), (3, 5, 291))
        logits = hsref.forward(model, tokens)["logits"]
        torch.testing.assert_close(lens[-1], torch.log_softmax(logits, -1), rtol=0, atol=1e-12)
        torch.testing.assert_close(lens.exp().sum(-1), torch.ones(3, 5, dtype=torch.float64))

    def test_circuits_identities(self):
        model = hsref.load_gpt2(os.path.join(FIXTURES, "full_context"))  # d_head 12, d_model 36
        c = model.config
        out = hsref.circuits(model, 1, 2, [290, 46, 69, 46], top_k=4)
        W_Q, W_K, W_V, W_O = hsref.head_matrices(model, 1, 2)
        W_E, W_U = hsref.embed_unembed(model)
        # rank <= d_head: the singular values past d_head vanish
        sv = torch.linalg.svdvals(W_Q @ W_K.T)
        self.assertLess(float(sv[c.d_head:].max()), 1e-12 * float(sv[0]))
        # the nonzero eigenvalues of (W_E W_V)(W_O W_U) are those of (W_O W_U)(W_E W_V)
        small = sorted(torch.linalg.eigvals(W_O @ W_U @ W_E @ W_V).tolist(), key=lambda z: (-z.real, -z.imag))
        np.testing.assert_allclose([z.real for z in small], out["ov_eigenvalues_real"], rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose([z.imag for z in small], out["ov_eigenvalues_imag"], rtol=1e-9, atol=1e-9)
        self.assertLessEqual(abs(out["copying_score"]), 1.0)
        # no positions: the same token, the same QK row
        self.assertEqual(out["qk_scores"][1], out["qk_scores"][3])
        self.assertEqual(out["ov_top_ids"][1], out["ov_top_ids"][3])

    def test_analyses_fixtures_are_up_to_date(self):
        analyses = os.path.join(REPO, "tests", "fixtures", "analyses")
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([sys.executable, os.path.join(analyses, "make_lens_circuits.py"), "--out", d],
                           check=True, stdout=subprocess.DEVNULL)
            for name in sorted(os.listdir(d)):
                for file in sorted(os.listdir(os.path.join(d, name))):
                    with self.subTest(f"{name}/{file}"):
                        with open(os.path.join(analyses, name, file), "rb") as a, \
                                open(os.path.join(d, name, file), "rb") as b:
                            self.assertEqual(a.read(), b.read())


class EditsTest(unittest.TestCase):
    """edit_hooks (every editable hook) against the definitions it must agree with."""

    def test_edits_fixtures_are_up_to_date(self):
        analyses = os.path.join(REPO, "tests", "fixtures", "analyses")
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([sys.executable, os.path.join(analyses, "make_edits.py"), "--out", d],
                           check=True, stdout=subprocess.DEVNULL)
            for file in sorted(os.listdir(d)):
                with self.subTest(file):
                    with open(os.path.join(analyses, "edits", file), "rb") as a, \
                            open(os.path.join(d, file), "rb") as b:
                        self.assertEqual(a.read(), b.read())

    def test_edit_hooks_agree_with_ablation_and_their_own_keys(self):
        model = hsref.load_gpt2(os.path.join(FIXTURES, "f32_prefixed"))
        tokens = [290, 5, 77, 260, 13, 99]
        zero = hsref.forward(model, tokens, hooks=hsref.edit_hooks(
            [{"hook": "attn.hook_z", "layer": 1, "unit": 2, "pos": -1, "kind": "zero"}]))
        ablated = hsref.forward(model, tokens, hooks=hsref.ablation_hooks([(1, 2, "zero")]))
        torch.testing.assert_close(zero["logits"], ablated["logits"], rtol=0, atol=0)
        plain = hsref.forward(model, tokens)
        v = [0.1 * i for i in range(model.config.d_model)]
        steered = hsref.forward(model, tokens, hooks=hsref.edit_hooks(
            [{"hook": "hook_resid_mid", "layer": 0, "unit": -1, "pos": 2, "kind": "steer", "vector": v, "scale": 2.0}]))
        delta = steered["blocks.0.hook_resid_mid"] - plain["blocks.0.hook_resid_mid"]
        torch.testing.assert_close(delta[2], 2.0 * torch.tensor(v, dtype=torch.float64))
        self.assertEqual(float(delta[:2].abs().max()), 0.0)
        meaned = hsref.forward(model, tokens, hooks=hsref.edit_hooks(
            [{"hook": "mlp.hook_post", "layer": 1, "unit": 5, "pos": -1, "kind": "mean"}]))
        post = meaned["blocks.1.mlp.hook_post"][:, 5]
        torch.testing.assert_close(post, plain["blocks.1.mlp.hook_post"][:, 5].mean().expand(len(tokens)))


class InterventionTest(unittest.TestCase):
    """The ablation and patching definitions against identities that must hold whatever the weights."""

    def setUp(self):
        self.model = hsref.load_gpt2(os.path.join(FIXTURES, "f32_prefixed"))
        with open(os.path.join(FIXTURES, "f32_prefixed", "fixture.json"), encoding="utf-8") as f:
            self.tokens = json.load(f)["tokens"]

    def test_ablation_hooks(self):
        plain = hsref.forward(self.model, self.tokens)
        ablated = hsref.forward(self.model, self.tokens, hooks=hsref.ablation_hooks(hsref.parse_ablations("1.2,0.1:mean")))
        self.assertTrue(torch.all(ablated["blocks.1.attn.hook_z"][:, 2] == 0))
        z01 = ablated["blocks.0.attn.hook_z"][:, 1]
        self.assertTrue(torch.allclose(z01, plain["blocks.0.attn.hook_z"][:, 1].mean(0).expand_as(z01)))
        # Layer 0 before its z, and the other heads' z of layer 0, are untouched.
        self.assertTrue(torch.equal(ablated["blocks.0.attn.hook_pattern"], plain["blocks.0.attn.hook_pattern"]))
        self.assertTrue(torch.equal(ablated["blocks.0.attn.hook_z"][:, 0], plain["blocks.0.attn.hook_z"][:, 0]))
        self.assertFalse(torch.equal(ablated["logits"], plain["logits"]))
        with self.assertRaises(ValueError):
            hsref.forward(self.model, self.tokens, hooks={"blocks.0.attn.hook_result": [lambda x: x]})

    def test_patching_identities(self):
        corrupt = list(self.tokens)
        corrupt[5] = 100
        clean_cache = hsref.forward(self.model, self.tokens)
        # Every position of resid_pre at layer 0 patched: the clean run.
        hooks = {"blocks.0.hook_resid_pre": [lambda x: clean_cache["blocks.0.hook_resid_pre"]]}
        patched = hsref.forward(self.model, corrupt, hooks=hooks)
        self.assertTrue(torch.allclose(patched["logits"], clean_cache["logits"]))
        r = hsref.patching_sweep(self.model, self.tokens, corrupt, 0, 11, "resid_pre")
        # Positions before the corruption change nothing; the corrupted position at layer 0 restores
        # the clean run.
        self.assertTrue(np.allclose(r["normalized"][:, :5], 0.0, atol=1e-9))
        self.assertAlmostEqual(r["normalized"][0, 5], 1.0, places=9)
        z = hsref.patching_sweep(self.model, self.tokens, corrupt, 0, 11, "z")
        self.assertEqual(z["raw"].shape, (self.model.config.n_layer, self.model.config.n_head))


class AblatePatchFixturesUpToDateTest(unittest.TestCase):
    def test_regeneration_is_byte_identical(self):
        out = os.path.join(REPO, "tests", "fixtures", "analyses", "ablate_patch")
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([sys.executable, os.path.join(REPO, "tests", "fixtures", "analyses", "make_ablate_patch.py"),
                            "--out", d], check=True, capture_output=True)
            for file in sorted(os.listdir(out)):
                with self.subTest(file):
                    with open(os.path.join(out, file), "rb") as a, open(os.path.join(d, file), "rb") as b:
                        self.assertEqual(a.read(), b.read())


if __name__ == "__main__":
    unittest.main()
