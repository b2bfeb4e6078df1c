#!/usr/bin/python3
"""Writes a random model folder shaped exactly like GPT-2 small, for benchmarks (not committed).

    /usr/bin/python3 tools/bench/make_gpt2_small.py OUT_DIR [--seed 0]

12 layers, 12 heads, d_model 768, d_mlp 3072, vocab 50257, n_positions 1024; F32,
`transformer.`-prefixed Hugging Face names, tied unembedding (no lm_head.weight): ~500 MB.
Scales follow GPT-2's initialisation (matrices std 0.02, residual projections 0.02/sqrt(2*n_layer),
LayerNorm weights 1), with small non-zero biases. The tokenizer files are GPT-2's real ones when
../shared/gpt2-tokenizer exists beside the repository (or --tokenizer DIR); otherwise a valid
stand-in byte-level BPE with the same 50,257 ids (the benchmarks only feed token ids).
"""

import argparse
import json
import os
import shutil
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools", "reference"))
import hsref  # noqa: E402

N_LAYER, N_HEAD, D_MODEL, D_MLP, N_VOCAB, N_CTX = 12, 12, 768, 3072, 50257, 1024


def config() -> dict:
    return {
        "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
        "bos_token_id": 50256, "eos_token_id": 50256, "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2", "n_ctx": N_CTX, "n_embd": D_MODEL, "n_head": N_HEAD,
        "n_inner": None, "n_layer": N_LAYER, "n_positions": N_CTX,
        "reorder_and_upcast_attn": False, "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True, "tie_word_embeddings": True, "torch_dtype": "float32",
        "vocab_size": N_VOCAB,
    }


def weights(seed: int) -> dict:
    rng = np.random.default_rng(seed)

    def normal(shape, std, mean=0.0):
        x = rng.standard_normal(shape, dtype=np.float32)  # float32 directly: fast, no 1 GB float64 detour
        x *= np.float32(std)
        if mean:
            x += np.float32(mean)
        return x

    proj_std = 0.02 / np.sqrt(2 * N_LAYER)
    w = {"transformer.wte.weight": normal((N_VOCAB, D_MODEL), 0.02),
         "transformer.wpe.weight": normal((N_CTX, D_MODEL), 0.01),
         "transformer.ln_f.weight": normal((D_MODEL,), 0.02, 1.0),
         "transformer.ln_f.bias": normal((D_MODEL,), 0.02)}
    for i in range(N_LAYER):
        p = f"transformer.h.{i}."
        w.update({
            p + "ln_1.weight": normal((D_MODEL,), 0.02, 1.0), p + "ln_1.bias": normal((D_MODEL,), 0.02),
            p + "attn.c_attn.weight": normal((D_MODEL, 3 * D_MODEL), 0.02),
            p + "attn.c_attn.bias": normal((3 * D_MODEL,), 0.02),
            p + "attn.c_proj.weight": normal((D_MODEL, D_MODEL), proj_std),
            p + "attn.c_proj.bias": normal((D_MODEL,), 0.02),
            p + "ln_2.weight": normal((D_MODEL,), 0.02, 1.0), p + "ln_2.bias": normal((D_MODEL,), 0.02),
            p + "mlp.c_fc.weight": normal((D_MODEL, D_MLP), 0.02), p + "mlp.c_fc.bias": normal((D_MLP,), 0.02),
            p + "mlp.c_proj.weight": normal((D_MLP, D_MODEL), proj_std),
            p + "mlp.c_proj.bias": normal((D_MODEL,), 0.02),
        })
    return w


def bytes_to_unicode() -> dict:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def write_standin_tokenizer(out: str, n_ids: int = N_VOCAB) -> None:
    """256 byte symbols + (n_ids - 257) merges of two byte symbols + <|endoftext|> = n_ids ids
    (50,257 by default: GPT-2's size): a valid byte-level BPE that tokenizes nothing well
    (benchmarks feed ids)."""
    assert 257 <= n_ids <= 256 * 256 + 257
    symbols = list(bytes_to_unicode().values())
    vocab = {s: i for i, s in enumerate(symbols)}
    merges = []
    for a in symbols:
        for b in symbols:
            if len(merges) == n_ids - 257:
                break
            merges.append(f"{a} {b}")
            vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    assert len(vocab) == n_ids
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=True)
    with open(os.path.join(out, "merges.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="output folder (created)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", default=os.path.join(os.path.dirname(REPO), "shared", "gpt2-tokenizer"),
                        help="folder with GPT-2's vocab.json and merges.txt (default ../shared/gpt2-tokenizer)")
    args = parser.parse_args()
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config(), f, indent=2)
        f.write("\n")
    if all(os.path.isfile(os.path.join(args.tokenizer, n)) for n in ("vocab.json", "merges.txt")):
        for n in ("vocab.json", "merges.txt"):
            shutil.copyfile(os.path.join(args.tokenizer, n), os.path.join(args.out, n))
        tok = f"GPT-2's tokenizer from {args.tokenizer}"
    else:
        write_standin_tokenizer(args.out)
        tok = "a stand-in byte-level BPE (50,257 ids)"
    w = weights(args.seed)
    n_params = sum(a.size for a in w.values())
    hsref.write_safetensors(os.path.join(args.out, "model.safetensors"), w, dtypes="F32",
                            metadata={"format": "pt"})
    size = os.path.getsize(os.path.join(args.out, "model.safetensors"))
    print(f"wrote {args.out}: {n_params:,} parameters, model.safetensors {size / 1e6:.0f} MB, {tok}, "
          f"{time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
