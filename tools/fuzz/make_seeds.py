#!/usr/bin/env python3
"""Writes the committed seed corpora of the fuzz targets (tools/fuzz/corpus/<target>/).

Deterministic (fixed seed), standard library only. The safetensors seeds hold weights of exactly
the sizes of fuzz_common.h's tiny config, so they pass every check and the fuzzer mutates from
files that reach the weight loader. Run from anywhere:  python3 tools/fuzz/make_seeds.py
"""
import json
import random
import shutil
import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CORPUS = HERE / "corpus"

# Must match kTinyConfigJson in fuzz_common.h.
D, H, L, C, V, M = 4, 2, 1, 4, 8, 8


def shapes(lm_head=False, masks=False):
    s = {"wte.weight": [V, D], "wpe.weight": [C, D], "ln_f.weight": [D], "ln_f.bias": [D]}
    for l in range(L):
        p = f"h.{l}."
        s.update({
            p + "ln_1.weight": [D], p + "ln_1.bias": [D],
            p + "attn.c_attn.weight": [D, 3 * D], p + "attn.c_attn.bias": [3 * D],
            p + "attn.c_proj.weight": [D, D], p + "attn.c_proj.bias": [D],
            p + "ln_2.weight": [D], p + "ln_2.bias": [D],
            p + "mlp.c_fc.weight": [D, M], p + "mlp.c_fc.bias": [M],
            p + "mlp.c_proj.weight": [M, D], p + "mlp.c_proj.bias": [D],
        })
        if masks:
            s[p + "attn.bias"] = [1, 1, C, C]
            s[p + "attn.masked_bias"] = []
    if lm_head:
        s["lm_head.weight"] = [V, D]
    return s


def encode(value, dtype):
    f32 = struct.pack("<f", value)
    if dtype == "F32":
        return f32
    if dtype == "BF16":
        return f32[2:]
    if dtype == "F16":
        return struct.pack("<e", value)
    if dtype == "F64":
        return struct.pack("<d", value)
    raise ValueError(dtype)


def safetensors(dtype="F32", prefix="", lm_head=False, masks=False, metadata=None, rng=None):
    """A file in the layout the format's writers use: tensors sorted by name, header padded to 8."""
    rng = rng or random.Random(0)
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, shape in sorted(shapes(lm_head, masks).items()):
        full = name if name.startswith("lm_head") else prefix + name
        n = 1
        for d in shape:
            n *= d
        blob = b"".join(encode(round(rng.gauss(0, 0.5), 3), dtype) for _ in range(n))
        header[full] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def write(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def main():
    if CORPUS.exists():
        shutil.rmtree(CORPUS)
    rng = random.Random(1234)

    # safetensors + weight loader
    write("safetensors", "f32_plain", safetensors("F32", rng=rng))
    write("safetensors", "f32_prefixed_masks", safetensors("F32", "transformer.", masks=True, rng=rng))
    write("safetensors", "f16_lm_head", safetensors("F16", lm_head=True, rng=rng))
    write("safetensors", "bf16_prefixed", safetensors("BF16", "transformer.", metadata={"format": "pt"}, rng=rng))
    write("safetensors", "f64_plain", safetensors("F64", rng=rng))
    tiny = {"a": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]},
            "b": {"dtype": "U8", "shape": [], "data_offsets": [16, 17]}}
    text = json.dumps(tiny).encode()
    write("safetensors", "ints", struct.pack("<Q", len(text)) + text + bytes(range(17)))
    write("safetensors", "empty_header", struct.pack("<Q", 2) + b"{}")

    # config.json
    # Every family's layout: the GPT-2 fixtures, then the rotary ones (Llama, Qwen2 with a window,
    # Qwen3's q/k norms, GPT-NeoX, Gemma 2's soft-caps and Gemma 3's layer_types and local rotary).
    for name in ("f32_prefixed", "f16_plain", "bf16_prefixed", "full_context", "llama_gqa", "qwen2_window",
                 "qwen3_qknorm", "neox_parallel", "gemma2_window", "gemma3_local_global", "gemma3_pattern"):
        write("config", name, (ROOT / "tests/fixtures/models" / name / "config.json").read_bytes())
    # transformers 5's form of Gemma 3's rotation (rope_parameters per attention type).
    g3 = json.loads((ROOT / "tests/fixtures/models/gemma3_local_global/config.json").read_text())
    g3["rope_parameters"] = {"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}
    for key in ("rope_theta", "rope_scaling", "rope_local_base_freq"):
        g3.pop(key)
    write("config", "gemma3_rope_parameters", json.dumps(g3, indent=2))
    write("config", "gpt2", json.dumps({
        "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
        "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
        "n_inner": None, "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "vocab_size": 50257}, indent=2))
    write("config", "architectures_only", json.dumps({
        "architectures": ["GPT2LMHeadModel"], "n_embd": 8, "n_head": 2, "n_layer": 1, "n_ctx": 4,
        "vocab_size": 300, "bos_token_id": [1, 2]}))

    # tokenizer files: vocab.json NUL merges.txt
    fx = ROOT / "tests/fixtures/models/f32_prefixed"
    write("tokenizer_files", "fixture", (fx / "vocab.json").read_bytes() + b"\0" + (fx / "merges.txt").read_bytes())
    small = ROOT / "tests/fixtures/tokenizer"
    if (small / "small_vocab.json").exists():
        write("tokenizer_files", "small", (small / "small_vocab.json").read_bytes() + b"\0" +
              (small / "small_merges.txt").read_bytes())

    # tokenizer.json: the small self-made files, one per code path
    for f in sorted(small.glob("small_hf_*.json")):
        write("tokenizer_json", f.stem, f.read_bytes())

    # llama2.c tokenizer .bin: <unk>, BOS, EOS, the 256 byte tokens, a few merges
    pieces = [(b"<unk>", 0.0), (b"\n<s>\n", 0.0), (b"\n</s>\n", 0.0)]
    pieces += [(b"<0x%02X>" % b, 0.0) for b in range(256)]
    pieces += [(b" ", -1.0), (b"a", -2.0), (b"b", -3.0), (b"ab", 5.0), (b"ba", 5.0), (b" a", 1.0),
               ("\u00e9".encode(), -4.0), (b" ab", 0.5), (b"Once", 2.0), (b" upon", 3.0)]
    blob = struct.pack("<i", 16) + b"".join(struct.pack("<fi", score, len(p)) + p for p, score in pieces)
    write("llama2c_tokenizer", "tiny", blob)

    # tokenizing arbitrary text
    texts = {
        "plain": "The cat sat on the mat!",
        "contractions": "I'm sure they'll say it's fine, we've won't you'd",
        "spaces": "a  b   c\t\td\n\n\ne    \n ",
        "digits": "1234567 3.14159 2024-11-29 +1 (555) 010",
        "unicode": "h\u00e9llo na\u00efve \u4e2d\u6587 \U0001F468\u200d\U0001F469\u200d\U0001F467 e\u0301",
        "eot": "one<|endoftext|>two <|endoftext|> <|endoftext|>",
        "punct": "!!!??? ... --- ;;; \"quoted\" (paren) [br] {x}",
    }
    for name, t in texts.items():
        write("tokenize", name, t)

    # export round trip: flags byte, then little-endian token ids
    write("export", "short", bytes([0]) + struct.pack("<3H", 290, 51, 257))
    write("export", "stored", bytes([3]) + struct.pack("<13H", 290, 51, 257, 273, 270, 267, 270, 220, 262, 258, 280, 270, 0))
    write("export", "full", bytes([1]) + struct.pack("<24H", *range(0, 288, 12)))


if __name__ == "__main__":
    main()
