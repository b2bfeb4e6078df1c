#!/usr/bin/python3
"""Writes random Gemma 2 and Qwen3 model folders shaped like real ones, for benchmarks (not committed).

    /usr/bin/python3 tools/bench/make_gemma_shapes.py OUT_DIR --shape gemma-2-2b|qwen3-0.6b [--seed 0]
    /usr/bin/python3 tools/bench/make_gemma_shapes.py OUT_DIR --shape gemma2-tiny|qwen3-tiny

- gemma-2-2b: google/gemma-2-2b (Gemma2ForCausalLM), its config.json as published (transformers
  4.42.4) but for torch_dtype: 26 layers, 8 query heads sharing 4 key/value heads, d_model 2304,
  d_head 256, GeGLU (tanh GELU) d_mlp 9216, vocabulary 256,000, query_pre_attn_scalar 256,
  sliding window 4096 on the even layers, attention soft-cap 50, final soft-cap 30, rope_theta
  10000, tied unembedding (Gemma2Config's default; the real config.json leaves it out). 2.6 B
  parameters, 5.2 GB in BF16, in three shards with model.safetensors.index.json like the real
  checkpoint (see SHARD_BYTES).
- qwen3-0.6b: Qwen/Qwen3-0.6B (Qwen3ForCausalLM), its config.json as published: 28 layers, 16
  query heads sharing 8 key/value heads, d_model 1024, d_head 128 (16 x 128 = 2048 is not
  d_model), q_norm / k_norm over d_head, SwiGLU d_mlp 3072, vocabulary 151,936, rope_theta 1e6,
  no sliding window, tied unembedding; 0.6 B parameters, 1.2 GB, one model.safetensors as the real one.
- gemma2-tiny, qwen3-tiny: the same layouts shrunk (d_model 64, 4 layers), with what matters at
  a few tokens made to matter: a sliding window of 3 keys (Qwen3's on layers >= 2 through
  use_sliding_window / max_window_layers), soft-caps small enough to bend the scores and logits,
  query_pre_attn_scalar unlike d_head. For checking torch_bench.py against tools/reference
  (tools/bench/check_torch_bench.py).

Weights are BF16 on disk, with Hugging Face's names and nn.Linear [out, in] layout; matrices std
0.02 (the output projections 0.02 / sqrt(2 n_layer)); Gemma's norm weights near 0 (the model
applies 1 + w), Qwen3's near 1. Every tensor is generated, rounded and written in chunks of
CHUNK floats, so writing the 5 GB folder holds at most a few hundred MB. The tokenizer is the
stand-in byte-level BPE of tools/bench/make_gpt2_small.py (at most 50,257 ids): the benchmarks
feed token ids.
"""

import argparse
import json
import os
import struct
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_gpt2_small import write_standin_tokenizer  # noqa: E402

# google/gemma-2-2b's config.json (transformers 4.42.4), torch_dtype changed: the real one is float32.
GEMMA_2_2B = {
    "architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
    "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304, "initializer_range": 0.02,
    "intermediate_size": 9216, "max_position_embeddings": 8192, "model_type": "gemma2",
    "num_attention_heads": 8, "num_hidden_layers": 26, "num_key_value_heads": 4, "pad_token_id": 0,
    "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096,
    "torch_dtype": "bfloat16", "transformers_version": "4.42.4", "use_cache": True, "vocab_size": 256000,
}
# Qwen/Qwen3-0.6B's config.json (transformers 4.51.0).
QWEN3_06B = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
    "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 40960,
    "max_window_layers": 28, "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
    "sliding_window": None, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
}
SHAPES = {
    "gemma-2-2b": GEMMA_2_2B,
    "qwen3-0.6b": QWEN3_06B,
    "gemma2-tiny": {**GEMMA_2_2B, "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 4,
                    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                    "query_pre_attn_scalar": 24, "sliding_window": 3, "attn_logit_softcapping": 0.5,
                    "final_logit_softcapping": 0.3, "vocab_size": 300, "max_position_embeddings": 64,
                    "tie_word_embeddings": False},
    "qwen3-tiny": {**QWEN3_06B, "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 4,
                   "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24, "vocab_size": 300,
                   "max_position_embeddings": 64, "use_sliding_window": True, "sliding_window": 3,
                   "max_window_layers": 2},
}
# The real gemma-2-2b is float32 in shards of at most 5 GB (save_pretrained's max_shard_size):
# 4.99, 4.98 and 0.48 GB. Half the limit on BF16 bytes cuts at the same tensors, so the shards
# hold what the real ones hold. None: one model.safetensors (Qwen3-0.6B's is one file).
SHARD_BYTES = {"gemma-2-2b": 2_500_000_000, "gemma2-tiny": 100_000}
CHUNK = 1 << 23  # floats generated and rounded at a time (32 MB as float32)


def tensor_specs(c: dict):
    """[(name, shape, std, mean)] in the order of the model's state_dict (module registration
    order in modeling_gemma2.py / modeling_qwen3.py), which is how save_pretrained fills shards."""
    D, F, L = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    H, KV, dh = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    gemma = c["model_type"] == "gemma2"
    norm_mean = 0.0 if gemma else 1.0  # Gemma2RMSNorm applies (1 + w); its init is zeros
    out_std = 0.02 / np.sqrt(2 * L)
    specs = [("model.embed_tokens.weight", (c["vocab_size"], D), 0.02, 0.0)]
    for i in range(L):
        p = f"model.layers.{i}."
        specs += [(p + "self_attn.q_proj.weight", (H * dh, D), 0.02, 0.0),
                  (p + "self_attn.k_proj.weight", (KV * dh, D), 0.02, 0.0),
                  (p + "self_attn.v_proj.weight", (KV * dh, D), 0.02, 0.0),
                  (p + "self_attn.o_proj.weight", (D, H * dh), out_std, 0.0)]
        if not gemma:  # Qwen3Attention registers q_norm and k_norm after o_proj
            specs += [(p + "self_attn.q_norm.weight", (dh,), 0.02, 1.0),
                      (p + "self_attn.k_norm.weight", (dh,), 0.02, 1.0)]
        specs += [(p + "mlp.gate_proj.weight", (F, D), 0.02, 0.0),
                  (p + "mlp.up_proj.weight", (F, D), 0.02, 0.0),
                  (p + "mlp.down_proj.weight", (D, F), out_std, 0.0),
                  (p + "input_layernorm.weight", (D,), 0.02, norm_mean),
                  (p + "post_attention_layernorm.weight", (D,), 0.02, norm_mean)]
        if gemma:
            specs += [(p + "pre_feedforward_layernorm.weight", (D,), 0.02, norm_mean),
                      (p + "post_feedforward_layernorm.weight", (D,), 0.02, norm_mean)]
    specs.append(("model.norm.weight", (D,), 0.02, norm_mean))
    if not c.get("tie_word_embeddings", gemma):
        specs.append(("lm_head.weight", (c["vocab_size"], D), 0.02, 0.0))
    return specs


def shards(specs, max_bytes):
    """Groups specs as huggingface_hub's split_torch_state_dict_into_shards does: in order, a new
    shard when the next tensor would take the current one past max_bytes."""
    if max_bytes is None:
        return [specs]
    out, size = [[]], 0
    for s in specs:
        nbytes = 2 * int(np.prod(s[1]))
        if out[-1] and size + nbytes > max_bytes:
            out.append([])
            size = 0
        out[-1].append(s)
        size += nbytes
    return out


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> BF16 bit patterns, round to nearest, ties to even (no NaN in random normals)."""
    bits = x.view(np.uint32)
    bits += np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (bits >> np.uint32(16)).astype("<u2")


def write_shard(path: str, specs, rng) -> int:
    """One safetensors file, tensors sorted by name as hsref.write_safetensors writes them; each
    tensor's values are drawn and written chunk by chunk. Returns the data bytes."""
    specs = sorted(specs, key=lambda s: s[0].encode("utf-8"))
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, _, _ in specs:
        n = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-len(text)) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, shape, std, mean in specs:
            left = int(np.prod(shape))
            while left:
                n = min(left, CHUNK)
                x = rng.standard_normal(n, dtype=np.float32)
                x *= np.float32(std)
                if mean:
                    x += np.float32(mean)
                f.write(bf16_bits(x).tobytes())
                left -= n
    os.replace(tmp, path)  # nothing half-written under the final name
    return offset


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="output folder (created)")
    parser.add_argument("--shape", choices=sorted(SHAPES), required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    t0 = time.time()
    c = SHAPES[args.shape]
    os.makedirs(args.out, exist_ok=True)
    for stale in os.listdir(args.out):  # a folder written before with another layout
        if stale.endswith(".safetensors") or stale in ("model.safetensors.index.json", "config.json"):
            os.remove(os.path.join(args.out, stale))
    specs = tensor_specs(c)
    groups = shards(specs, SHARD_BYTES.get(args.shape))
    rng = np.random.default_rng(args.seed)
    total, weight_map = 0, {}
    for i, group in enumerate(groups):
        name = "model.safetensors" if len(groups) == 1 else f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        total += write_shard(os.path.join(args.out, name), group, rng)
        weight_map.update({s[0]: name for s in group})
    if len(groups) > 1:
        with open(os.path.join(args.out, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
            f.write("\n")
    # config.json last: a folder with one is complete (run.sh checks for it).
    write_standin_tokenizer(args.out, min(50257, c["vocab_size"]))
    with open(os.path.join(args.out, "config.json"), "w", encoding="utf-8") as f:
        json.dump(c, f, indent=2)
        f.write("\n")
    n_params = sum(int(np.prod(s[1])) for s in specs)
    print(f"wrote {args.out} ({args.shape}): {n_params:,} parameters, {len(groups)} file(s), {total / 1e9:.2f} GB "
          f"(BF16), {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
