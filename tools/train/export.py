#!/usr/bin/python3
"""Export a training checkpoint as a Hugging Face GPT-2 model folder with F16 weights.

    /usr/bin/python3 tools/train/export.py --ckpt WORK/run/final.pt --tok TOKDIR --out resources/models/headscope-tiny

Writes config.json, model.safetensors (F16, Hugging Face names without the `transformer.`
prefix, no lm_head: tied to wte), vocab.json, merges.txt. Everything measured afterwards
(head scores, held-out loss, fixtures) loads this folder back, so numbers are those of the
F16-rounded weights.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2 import Config, save_safetensors  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--tok", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    ck = torch.load(args.ckpt)
    cfg = Config.from_hf(ck["config"])
    os.makedirs(args.out, exist_ok=True)
    tensors = {}
    for k, v in ck["model"].items():
        a = v.detach().cpu().float().numpy()
        h = a.astype(np.float16)
        if not np.all(np.isfinite(h)):
            raise SystemExit("tensor %s overflows float16" % k)
        tensors[k] = h
    save_safetensors(os.path.join(args.out, "model.safetensors"), tensors, {"format": "pt"})
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg.hf_dict(), f, indent=2)
        f.write("\n")
    for name in ("vocab.json", "merges.txt"):
        shutil.copyfile(os.path.join(args.tok, name), os.path.join(args.out, name))
    print("exported %d tensors to %s" % (len(tensors), args.out))


if __name__ == "__main__":
    main()
