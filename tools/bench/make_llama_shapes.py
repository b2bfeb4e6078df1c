#!/usr/bin/python3
"""Writes random Llama-family model folders shaped like real ones, for benchmarks (not committed).

    /usr/bin/python3 tools/bench/make_llama_shapes.py OUT_DIR --shape smollm-135m|qwen2.5-0.5b [--seed 0]

- smollm-135m: Hugging Face's SmolLM-135M (LlamaForCausalLM): 30 layers, 9 query heads sharing
  3 key/value heads, d_model 576, d_head 64, SwiGLU d_mlp 1536, vocabulary 49,152, rope_theta
  10000, tied unembedding; ~270 MB.
- qwen2.5-0.5b: Qwen2.5-0.5B (Qwen2ForCausalLM): 24 layers, 14 query heads sharing 2 key/value
  heads, d_model 896, d_head 64, d_mlp 4864, q/k/v biases, vocabulary 151,936, rope_theta 1e6,
  tied unembedding; ~1 GB.

Weights are BF16 on disk, as the real checkpoints are, with Hugging Face's names and nn.Linear
[out, in] layout. Scales follow the usual initialisation (matrices std 0.02, norm weights near 1).
The tokenizer is a stand-in byte-level BPE (tools/bench/make_gpt2_small.py's) of at most 50,257
ids: the benchmarks feed token ids.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools", "reference"))
sys.path.insert(0, HERE)
import hsref  # noqa: E402
from make_gpt2_small import write_standin_tokenizer  # noqa: E402

SHAPES = {
    "smollm-135m": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
        "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
        "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152, "max_position_embeddings": 2048,
        "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": True, "hidden_act": "silu",
        "attention_bias": False, "mlp_bias": False, "bos_token_id": 1, "eos_token_id": 2,
        "rope_scaling": None, "torch_dtype": "bfloat16",
    },
    "qwen2.5-0.5b": {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
        "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
        "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "hidden_act": "silu",
        "use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 21,
        "bos_token_id": 151643, "eos_token_id": 151643, "rope_scaling": None, "torch_dtype": "bfloat16",
    },
}


def weights(c: dict, seed: int) -> dict:
    rng = np.random.default_rng(seed)

    def normal(shape, std, mean=0.0):
        x = rng.standard_normal(shape, dtype=np.float32)
        x *= np.float32(std)
        if mean:
            x += np.float32(mean)
        return x

    D, F, L = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    H, KV = c["num_attention_heads"], c["num_key_value_heads"]
    dh = c.get("head_dim", D // H)
    bias = c["model_type"] == "qwen2"
    out_std = 0.02 / np.sqrt(2 * L)
    w = {"model.embed_tokens.weight": normal((c["vocab_size"], D), 0.02),
         "model.norm.weight": normal((D,), 0.02, 1.0)}
    for i in range(L):
        p = f"model.layers.{i}."
        w.update({
            p + "input_layernorm.weight": normal((D,), 0.02, 1.0),
            p + "self_attn.q_proj.weight": normal((H * dh, D), 0.02),
            p + "self_attn.k_proj.weight": normal((KV * dh, D), 0.02),
            p + "self_attn.v_proj.weight": normal((KV * dh, D), 0.02),
            p + "self_attn.o_proj.weight": normal((D, H * dh), out_std),
            p + "post_attention_layernorm.weight": normal((D,), 0.02, 1.0),
            p + "mlp.gate_proj.weight": normal((F, D), 0.02),
            p + "mlp.up_proj.weight": normal((F, D), 0.02),
            p + "mlp.down_proj.weight": normal((D, F), out_std),
        })
        if bias:
            w.update({p + "self_attn.q_proj.bias": normal((H * dh,), 0.02),
                      p + "self_attn.k_proj.bias": normal((KV * dh,), 0.02),
                      p + "self_attn.v_proj.bias": normal((KV * dh,), 0.02)})
    return w


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="output folder (created)")
    parser.add_argument("--shape", choices=sorted(SHAPES), required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    t0 = time.time()
    c = SHAPES[args.shape]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "config.json"), "w", encoding="utf-8") as f:
        json.dump(c, f, indent=2)
        f.write("\n")
    write_standin_tokenizer(args.out, min(50257, c["vocab_size"]))
    w = weights(c, args.seed)
    n_params = sum(a.size for a in w.values())
    hsref.write_safetensors(os.path.join(args.out, "model.safetensors"), w, dtypes="BF16",
                            metadata={"format": "pt"})
    size = os.path.getsize(os.path.join(args.out, "model.safetensors"))
    print(f"wrote {args.out} ({args.shape}): {n_params:,} parameters, model.safetensors {size / 1e6:.0f} MB "
          f"(BF16), {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
