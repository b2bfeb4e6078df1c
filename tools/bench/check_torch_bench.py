#!/usr/bin/python3
"""Checks the PyTorch yardstick (torch_bench.py's TorchLlama, float32, the fast way) against the
plain float64 reference (tools/reference/hsref.py's llama_forward, written from Hugging Face's
modeling files) on tiny models, every cache key, before its speed is quoted.

    /usr/bin/python3 tools/bench/check_torch_bench.py [--rtol 1e-5] [--tokens 12]

The models: make_gemma_shapes.py's gemma2-tiny and qwen3-tiny (the benchmark shapes' layouts
shrunk, with a sliding window of 3 keys and small soft-caps, so the window, the caps, the post
norms and the q/k norms all change the values within 12 tokens; gemma2-tiny is sharded and
untied), written to a temporary folder, and the test fixtures of the Llama family in
tests/fixtures/models without rope_scaling (Qwen2 with biases and a window, Qwen3, Gemma 2). A key passes when
max |yardstick - reference| / max |reference| <= --rtol (hsref.compare_caches; masked scores must
be -inf on both sides) and both sides have the same keys, in each of the yardstick's two weight
layouts (torch_bench.py keeps whichever is faster). Prints one line a model and layout, exits 1
on a failure.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools", "reference"))
sys.path.insert(0, HERE)
import hsref  # noqa: E402
from torch_bench import LAYOUTS, TorchLlama, bench_tokens  # noqa: E402

TINY_SHAPES = ("gemma2-tiny", "qwen3-tiny")
# (the Llama fixtures have rope_scaling, which the yardstick refuses: the benchmark shapes have none)
FIXTURES = ("gemma2_window", "qwen3_qknorm", "qwen2_window", "qwen2_bias")


def check(model: TorchLlama, reference: dict, tokens, rtol: float):
    """(passed, worst key, its relative difference, number of keys) of the yardstick's pass in
    its current layout against `reference`"""
    with torch.inference_mode():
        cache = model.forward(torch.tensor(tokens, dtype=torch.long), keep_cache=True)
    candidate = {k: v.numpy() for k, v in cache.items()}
    results = hsref.compare_caches(reference, candidate, rtol=rtol)
    extra = sorted(set(candidate) - set(reference))
    worst = max(results, key=lambda r: r.max_rel)
    failed = [r for r in results if not r.ok]
    for r in failed[:5]:
        print(f"  {r.key}: {r.max_rel:.3g} {r.note}")
    if extra:
        print(f"  keys the reference does not have: {extra[:5]}")
    return not failed and not extra, worst.key, worst.max_rel, len(results)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--tokens", type=int, default=12)
    args = ap.parse_args()
    torch.set_num_threads(1)
    ok = True
    with tempfile.TemporaryDirectory(prefix="hs-torch-check-") as tmp:
        folders = []
        for shape in TINY_SHAPES:
            out = os.path.join(tmp, shape)
            subprocess.run([sys.executable, os.path.join(HERE, "make_gemma_shapes.py"), out, "--shape", shape],
                           check=True, stdout=subprocess.DEVNULL)
            folders.append((shape, out))
        folders += [(f, os.path.join(REPO, "tests", "fixtures", "models", f)) for f in FIXTURES]
        for name, folder in folders:
            model = TorchLlama(folder)
            tokens = bench_tokens(min(args.tokens, model.n_ctx), model.d_vocab)
            reference = {k: v.numpy() for k, v in hsref.llama_forward(hsref.load_llama(folder), tokens).items()}
            for layout in LAYOUTS:  # torch_bench.py times both and keeps the faster: both must be right
                model.set_layout(layout)
                passed, key, rel, n = check(model, reference, tokens, args.rtol)
                ok &= passed
                print(f"{'ok  ' if passed else 'FAIL'} {name} ({layout}): {n} keys, worst {key} at {rel:.2e} "
                      f"(rtol {args.rtol:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
