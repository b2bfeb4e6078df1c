#!/usr/bin/env python3
"""Writes the committed seed corpora of the fuzz targets (tools/fuzz/corpus/<target>/).

Deterministic (fixed seed), standard library only. The safetensors seeds hold weights of exactly
the sizes of fuzz_common.h's tiny config, so they pass every check and the fuzzer mutates from
files that reach the weight loader. Run from anywhere:  python3 tools/fuzz/make_seeds.py
"""
import base64
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


# The targets this script has written in this run: each one's folder is emptied the first time, so
# a seed dropped from the script goes, while corpus/edits (hand-made, committed) is never touched.
_cleared = set()


def write(target, name, data):
    d = CORPUS / target
    if target not in _cleared:
        shutil.rmtree(d, ignore_errors=True)
        _cleared.add(target)
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


M64 = (1 << 64) - 1


def mix64(x):
    """splitmix64's finalizer, as core/io/splitmix64.h's splitmix64_mix."""
    x ^= x >> 30
    x = (x * 0xbf58476d1ce4e5b9) & M64
    x ^= x >> 27
    x = (x * 0x94d049bb133111eb) & M64
    return x ^ (x >> 31)


def head_state(n_layers, n_heads, n_ctx, rng, window=2, capacity=3):
    """The "heads" state of scan --heads (HeadDatasetStats::state) for two short prompts."""
    heads = n_layers * n_heads
    b64 = lambda fmt, values: base64.b64encode(struct.pack("<%d%s" % (len(values), fmt), *values)).decode()
    unit = 1 << 32
    tokens = [1, 3, 5]
    samples = []
    for index, position in ((0, 1), (1, 2), (1, 1)):
        h = mix64(mix64((index + 0x9e3779b97f4a7c15) & M64) ^ position)
        first = max(0, position - window + 1)
        samples.append({"hash": h, "index": index, "position": position, "first": first,
                        "tokens": [tokens[(index + p) % 3] for p in range(first, position + 1)]})
    samples.sort(key=lambda e: (e["hash"], e["index"], e["position"]))
    samples = samples[:capacity]
    return {"sample_capacity": capacity, "window": window, "queries": 3,
            "distance": b64("Q", [rng.randrange(unit) if d < 3 else 0 for _ in range(heads) for d in range(n_ctx)]),
            "entropy": b64("q", [rng.randrange(3) for _ in range(heads * 40)]),
            "output_norm": {"rows": n_layers, "cols": n_heads, "count": [3] * heads,
                            "mean": [round(rng.uniform(0, 2), 6) for _ in range(heads)],
                            "m2": [round(rng.uniform(0, 1), 6) for _ in range(heads)]},
            "tokens": tokens, "token_text": ["a", "\u2423b", "c"], "key_count": [2, 1, 1], "query_count": [1, 1, 1],
            "key_mass": b64("Q", [rng.randrange(unit) for _ in range(heads * 3)]),
            "query_mass": b64("Q", [rng.randrange(unit) for _ in range(heads * 3)]),
            "samples": samples,
            "sample_norm": b64("f", [rng.uniform(0, 3) for _ in range(len(samples) * heads)]),
            "sample_pattern": b64("f", [rng.uniform(0, 1) for _ in range(len(samples) * heads * window)])}


def scan_output(n_layers=1, n_heads=2, n_ctx=4, shard=(0, 1), complete=True, merged=None, prompts=3, rng=None,
                bad=None, heads=False):
    """A scan's output JSON as core/analysis/scan.cpp's scan_to_json writes it, for a model of this shape."""
    rng = rng or random.Random(0)
    shapes = {name: (n_layers, n_heads) for name in
              ("previous_token", "duplicate_token", "induction", "attention_entropy", "dla_next_token", "patching_z")}
    shapes["loss_per_position"] = (max(n_ctx - 1, 1), 1)
    shapes["patching_resid_pre"] = (n_layers, n_ctx)
    aggregates, grids = {}, {}
    for name, (rows, cols) in sorted(shapes.items()):
        n = 0 if name.startswith("patching") else prompts
        count = [n] * (rows * cols)
        mean = [round(rng.uniform(-1, 1), 6) if n else 0.0 for _ in count]
        m2 = [round(rng.uniform(0, 2), 6) if n > 1 else 0.0 for _ in count]
        grids[name] = {"rows": rows, "cols": cols, "count": count, "mean": mean, "m2": m2}
        def table(values):
            out = [values[r * cols:(r + 1) * cols] for r in range(rows)]
            return [row[0] for row in out] if cols == 1 else out
        aggregates[name] = {"mean": table([m if n else None for m in mean]),
                            "std": table([(v / n) ** 0.5 if n else None for v in m2]),
                            "count": table(count)}
    bad = bad or {}
    out = {
        "format": "headscope-scan", "version": 2, "complete": complete,
        "settings": {"format": "headscope-scan", "version": 2,
                     "model": {"name": "tiny", "model_type": "gpt2", "n_layers": n_layers, "n_heads": n_heads,
                               "d_model": 4, "d_vocab": 8, "n_ctx": n_ctx, "parameters": 300,
                               "fingerprint": "0123456789abcdef"},
                     "input": {"fnv1a64": "cbf29ce484222325", "bytes": 40, "lines": 5, "format": "jsonl"},
                     "limit": -1, "max_tokens": 0, "bos": True,
                     "paths": {"model": "/models/tiny", "input": "/data/in.jsonl"}},
        "shard": {"index": shard[0], "count": shard[1]},
        "counts": {"input_indices": 5, "next_index": 5 if complete else 2, "prompts": prompts, "patch_rows": 0,
                   "truncated": 1, "bad_lines": sum(b["count"] for b in bad.values())},
        "bad_lines": bad,
        "labels": [f"L{l}H{h}" for l in range(n_layers) for h in range(n_heads)],
        "shape": {"n_layers": n_layers, "n_heads": n_heads, "n_ctx": n_ctx},
        "aggregates": aggregates,
        "state": {"per_prompt_bytes": 0, "grids": grids},
    }
    if merged:
        out["merged_shards"] = merged
    if heads:
        out["settings"]["heads"] = {"samples": 3, "window": 2}
        out["state"]["heads"] = head_state(n_layers, n_heads, n_ctx, rng)
    return json.dumps(out, indent=1) + "\n"


def llama2c_checkpoint(D=4, M=8, L=1, H=2, KV=2, V=8, C=4, shared=True, rng=None):
    """A run.c checkpoint: the 7 int32 of the header, then every float32 weight in run.c's order."""
    rng = rng or random.Random(0)
    hs = D // H
    floats = (V * D + 2 * L * D + 2 * L * D * D + 2 * L * KV * hs * D + 3 * L * M * D + D + C * hs +
              (0 if shared else V * D))
    header = struct.pack("<7i", D, M, L, H, KV, V if shared else -V, C)
    return header + b"".join(struct.pack("<f", round(rng.gauss(0, 0.5), 3)) for _ in range(floats))


def main():
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

    # scan input: first byte 0 a text file, 1 JSON Lines (fuzz_scan_rows.cpp)
    write("scan_rows", "text", b"\0The cat sat.\r\n\n   \nh\xc3\xa9llo \xe4\xb8\xad\n\xff\xfe bad\nlast, no newline")
    rows = [{"text": "When Mary and John went to the store, John gave a drink to"},
            {"clean": "When Mary and John went to the store, John gave a drink to",
             "corrupt": "When Mary and John went to the store, Mary gave a drink to",
             "answer": " Mary", "wrong": " John"},
            {"text": "  "}, {"clean": "a"}, {"clean": "a", "text": "b"}, {"text": 3}, [1, 2],
            {"text": "caf\u00e9 \u0000 \ud83d\ude00"}]
    lines = [json.dumps(r) for r in rows] + ["{not json", "", "\"a string\""]
    write("scan_rows", "jsonl", b"\1" + "\n".join(lines).encode() + b"\r\n")

    # scan output JSON (fuzz_scan_output.cpp): one process, shards, a merge, another shape
    write("scan_output", "complete", scan_output(rng=rng))
    write("scan_output", "shard_1_of_2_partial", scan_output(shard=(1, 2), complete=False, rng=rng,
                                                             bad={"bad_json": {"count": 2, "first_lines": [2, 4]},
                                                                  "empty": {"count": 1, "first_lines": [5]}}))
    write("scan_output", "merged", scan_output(merged=[0, 1], prompts=7, rng=rng))
    write("scan_output", "two_layers_ctx_1", scan_output(n_layers=2, n_heads=1, n_ctx=1, prompts=1, rng=rng))
    write("scan_output", "heads", scan_output(heads=True, rng=random.Random(5)))

    # attribution graph JSON (fuzz_graph_json.cpp): a small graph as headscope-cli graph writes it,
    # circuit-tracer's older error ids and pinned supernodes, and one with a dangling link
    def graph(error_id="0_-1_1", links=None, qparams=None):
        nodes = [
            {"node_id": "0_3_1", "feature": 9, "layer": "0", "ctx_idx": 1, "feature_type": "cross layer transcoder",
             "token_prob": 0.0, "is_target_logit": False, "influence": 0.4, "activation": 1.5, "clerp": ""},
            {"node_id": error_id, "feature": -1, "layer": "0", "ctx_idx": 1, "feature_type": "mlp reconstruction error",
             "influence": 0.7, "activation": None},
            {"node_id": "E_290_0", "feature": 0, "layer": "E", "ctx_idx": 0, "feature_type": "embedding"},
            {"node_id": "E_51_1", "feature": 1, "layer": "E", "ctx_idx": 1, "feature_type": "embedding"},
            {"node_id": "2_257_1", "feature": 257, "layer": "2", "ctx_idx": 1, "feature_type": "logit",
             "token_prob": 0.9, "is_target_logit": True, "clerp": "Output \" a\" (p=0.900)"},
        ]
        links = links if links is not None else [
            {"source": "E_51_1", "target": "0_3_1", "weight": 0.5},
            {"source": "0_3_1", "target": "2_257_1", "weight": -1.25},
            {"source": error_id, "target": "2_257_1", "weight": 2e-3}]
        return json.dumps({"metadata": {"slug": "seed", "scan": "headscope-tiny", "transcoder_list": [],
                                        "prompt_tokens": ["<|endoftext|>", " a"], "prompt": "<|endoftext|> a",
                                        "node_threshold": 0.8, "schema_version": 1},
                           "qParams": qparams or {"pinnedIds": [], "supernodes": [], "linkType": "both",
                                                  "clickedId": "", "sg_pos": ""},
                           "nodes": nodes, "links": links}, indent=1)
    write("graph_json", "small", graph())
    write("graph_json", "old_error_ids_pinned", graph(error_id="0_0_1", qparams={
        "pinnedIds": ["0_3_1", "2_257_1"], "supernodes": [["say a", "0_3_1", "0_0_1"]], "linkType": "both",
        "clickedId": "0_3_1", "sg_pos": ""}))
    write("graph_json", "dangling_link", graph(links=[{"source": "E_51_1", "target": "9_9_9", "weight": 1}]))

    # model.safetensors.index.json (fuzz_shard_index.cpp)
    names = sorted(shapes())
    half = len(names) // 2
    write("shard_index", "two_shards", json.dumps({
        "metadata": {"total_size": 1200},
        "weight_map": {n: "model-0000%d-of-00002.safetensors" % (1 if i < half else 2) for i, n in enumerate(names)}},
        indent=2))
    write("shard_index", "one_shard", json.dumps({"weight_map": {"wte.weight": "model.safetensors"}}))

    # llama2.c checkpoints (fuzz_llama2c_checkpoint.cpp): shared and separate classifier, grouped-query heads
    write("llama2c_checkpoint", "shared", llama2c_checkpoint(rng=rng))
    write("llama2c_checkpoint", "unshared", llama2c_checkpoint(shared=False, rng=rng))
    write("llama2c_checkpoint", "gqa_two_layers", llama2c_checkpoint(D=8, M=12, L=2, H=2, KV=1, V=6, C=3, rng=rng))

    # SAE configs (fuzz_sae_config.cpp): every fixture's cfg.json and config.yaml
    # (tests/fixtures/sae, written by tools/reference/make_sae_fixtures.py)
    for cfg in sorted((ROOT / "tests/fixtures/sae").glob("*/c*")):
        if cfg.name in ("cfg.json", "config.yaml"):
            write("sae_config", f"{cfg.parent.name}_{cfg.name.replace('.', '_')}", cfg.read_bytes())


if __name__ == "__main__":
    main()
