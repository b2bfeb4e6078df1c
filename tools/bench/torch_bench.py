#!/usr/bin/python3
"""PyTorch at its best on the same weights: the yardstick for HeadScope's forward-pass speed.

    /usr/bin/python3 tools/bench/torch_bench.py --model DIR --tokens 20 --threads 1 \
        --mode cache --warmup 3 --runs 20 [--max-seconds S] [--dump OUT.npz] [--token-ids 1,2,3]

Loads a Hugging Face GPT-2, Llama, Qwen2, Qwen3 or Gemma 2 folder (through tools/reference/hsref.py's
safetensors reader; the Llama family's tensors one at a time from the mapped files, so a BF16
checkpoint's float32 copy is all it holds) into float32 torch tensors and runs one forward pass per timed run under
torch.inference_mode():

- `--mode cache`: keeps every activation of DESIGN.md's cache contract, like TransformerLens's
  run_with_cache (per-head results are computed, hook_attn_out is their sum plus b_O);
- `--mode logits`: the plain forward pass (concatenated heads, one projection), logits only;
- `--mode patch`: an activation-patching sweep with TransformerLens's conventions, timed from
  the prompts: tools/reference/hsref.py's patching_sweep in float32 on weights converted once —
  the clean and the corrupted run, then one full forward pass per cell with a hook that copies
  the clean activation in, the metric read from the logits. The corrupted prompt is the clean one
  with position 1 changed to the next id (as hs_bench_row --mode patch); `--what` picks the
  activation, `--answer` and `--wrong` the metric's tokens.
- `--mode grad` (GPT-2): the gradient of logit(answer) - logit(wrong) at the last position at
  every cache key, TransformerLens-style: the cache-mode forward pass with autograd on,
  retain_grad on every key's tensor, backward from the metric; `--grad-style frozen|params` says
  whether the weights require gradients too (see GRAD_STYLES). Not under inference_mode.

Prints one JSON object: {"median_ms", "min_ms", "runs": [...], "peak_rss_mb", ...}; peak_rss_mb is
the whole process (ru_maxrss), run_peak_rss_mb the peak after loading (VmHWM reset through
/proc/self/clear_refs; null where that is not allowed), as hs_bench_row prints them. The prompt is
`--tokens N` deterministic ids (or exactly `--token-ids`). `--dump OUT.npz` writes one cache-mode
run in the format of `hsref.py run` (float32, masked scores -inf), to check this implementation:
`hsref.py compare --reference REF.npz --candidate OUT.npz`.

PyTorch runs on OpenBLAS's best kernel for the CPU (openblas_env.py: OPENBLAS_CORETYPE set from the
CPU's instruction sets, since Debian's OpenBLAS falls back to its SSE3 kernels on a CPU it does not
know) with libopenblas0-openmp; threads are always set explicitly. The script re-executes itself
with that environment before torch loads.

It also runs with glibc's malloc set as HeadScope sets its own (core/model/forward.cpp:
a fixed 4 MiB mmap threshold and a 64 MiB trim threshold, through GLIBC_TUNABLES). With glibc's
default, which moves the mmap threshold as blocks are freed, the cache mode's large tensors were
mapped and faulted in afresh on every pass or not depending on the process's allocation history:
106 ms against 68 ms for the same 20-token pass on the same machine, and the suite and a run
alone disagreed by about 2x between hosts (issue 27). HEADSCOPE_TORCH_MALLOC=default keeps glibc's
default. The JSON says which malloc setting and which BLAS and kernel ran (threadpoolctl).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from openblas_env import reexec_with_best_openblas  # noqa: E402

MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=4194304:glibc.malloc.trim_threshold=67108864"
reexec_with_best_openblas({} if os.environ.get("HEADSCOPE_TORCH_MALLOC") == "default"
                          else {"GLIBC_TUNABLES": MALLOC_TUNABLES})  # read by the dynamic loader: a new process

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools", "reference"))
import hsref  # noqa: E402

_ACT = {
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_accurate": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_fast": lambda x: 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x))),
    "gelu": F.gelu, "gelu_python": F.gelu,
    "relu": F.relu, "silu": F.silu, "swish": F.silu,
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
}


class Block:
    def __init__(self, w, p, H, dh, D):
        t = lambda name: torch.from_numpy(np.ascontiguousarray(w[p + name], dtype=np.float32))  # noqa: E731
        self.ln1_w, self.ln1_b = t("ln_1.weight"), t("ln_1.bias")
        self.w_qkv, self.b_qkv = t("attn.c_attn.weight"), t("attn.c_attn.bias")    # [d_model, 3*d_model]
        self.w_o, self.b_o = t("attn.c_proj.weight"), t("attn.c_proj.bias")         # [d_model, d_model]
        self.w_o_h = self.w_o.view(H, dh, D)                                         # [head, d_head, d_model]
        self.ln2_w, self.ln2_b = t("ln_2.weight"), t("ln_2.bias")
        self.w_fc, self.b_fc = t("mlp.c_fc.weight"), t("mlp.c_fc.bias")             # [d_model, d_mlp]
        self.w_proj, self.b_proj = t("mlp.c_proj.weight"), t("mlp.c_proj.bias")     # [d_mlp, d_model]


class TorchGPT2:
    def __init__(self, folder):
        m = hsref.load_gpt2(folder)
        self.c = c = m.config
        t = lambda name: torch.from_numpy(np.ascontiguousarray(m.weights[name], dtype=np.float32))  # noqa: E731
        self.wte, self.wpe = t("wte.weight"), t("wpe.weight")
        # The unembedding as [d_model, d_vocab], contiguous, as TransformerLens stores W_U: the
        # product with the tied [d_vocab, d_model] embedding's transpose took OpenBLAS's slower
        # transposed path (docs/benchmarks.md). A tied model pays for its own copy.
        w_u = self.wte if m.lm_head_tied else t("lm_head.weight")                    # [d_vocab, d_model]
        self.w_u = w_u.t().contiguous()                                              # [d_model, d_vocab]
        self.lnf_w, self.lnf_b = t("ln_f.weight"), t("ln_f.bias")
        self.blocks = [Block(m.weights, f"h.{i}.", c.n_head, c.d_head, c.d_model) for i in range(c.n_layer)]
        self.act = _ACT[c.activation]
        self.mask = torch.full((c.n_ctx, c.n_ctx), float("-inf")).triu(1)           # additive causal mask

    def forward(self, ids, keep_cache: bool, grad: bool = False):
        """With `grad` (and keep_cache), for --mode grad: the embeddings are leaves that require a
        gradient when the weights do not (TransformerLens's hook_embed and hook_pos_embed), and
        hook_z and hook_result are cached in the [head, pos, ...] layout the pass computes them in,
        the tensors on the autograd path (a transposed view of them would get no gradient)."""
        c = self.c
        n, H, dh, D, eps = ids.numel(), c.n_head, c.d_head, c.d_model, c.layer_norm_eps
        cache = {}
        embed, pos = self.wte[ids], self.wpe[:n]
        if grad and not embed.requires_grad:
            embed, pos = embed.detach().requires_grad_(), pos.detach().requires_grad_()
        resid = embed + pos                                                         # [pos, d_model]
        if keep_cache:
            cache["hook_embed"], cache["hook_pos_embed"] = embed, pos
        mask = self.mask[:n, :n]
        for l, b in enumerate(self.blocks):
            k_ = f"blocks.{l}."
            scale = (1.0 / math.sqrt(dh) if c.scale_attn_weights else 1.0) / \
                (l + 1 if c.scale_attn_by_inverse_layer_idx else 1)
            x = F.layer_norm(resid, (D,), b.ln1_w, b.ln1_b, eps)
            qkv = torch.addmm(b.b_qkv, x, b.w_qkv)                                   # [pos, 3*d_model]
            q, k, v = qkv.view(n, 3, H, dh).unbind(1)                                # [pos, head, d_head]
            # scale and causal mask in one kernel: mask + scale * q @ k^T
            scores = torch.baddbmm(mask, q.transpose(0, 1), k.permute(1, 2, 0), alpha=scale)  # [head, q, k]
            pattern = torch.softmax(scores, dim=-1)
            z_hqd = torch.bmm(pattern, v.transpose(0, 1))                            # [head, pos, d_head]
            if keep_cache:
                result_hqm = torch.bmm(z_hqd, b.w_o_h)                               # [head, pos, d_model]
                attn_out = result_hqm.sum(0) + b.b_o
                cache.update({k_ + "hook_resid_pre": resid, k_ + "attn.hook_q": q, k_ + "attn.hook_k": k,
                              k_ + "attn.hook_v": v, k_ + "attn.hook_attn_scores": scores,
                              k_ + "attn.hook_pattern": pattern,
                              k_ + "attn.hook_z": z_hqd if grad else z_hqd.transpose(0, 1),
                              k_ + "attn.hook_result": result_hqm if grad else result_hqm.transpose(0, 1),
                              k_ + "hook_attn_out": attn_out})
            else:
                attn_out = torch.addmm(b.b_o, z_hqd.transpose(0, 1).reshape(n, D), b.w_o)
            resid = resid + attn_out
            x = F.layer_norm(resid, (D,), b.ln2_w, b.ln2_b, eps)
            pre = torch.addmm(b.b_fc, x, b.w_fc)                                     # [pos, d_mlp]
            post = self.act(pre)
            mlp_out = torch.addmm(b.b_proj, post, b.w_proj)                          # [pos, d_model]
            if keep_cache:
                cache.update({k_ + "hook_resid_mid": resid, k_ + "mlp.hook_pre": pre,
                              k_ + "mlp.hook_post": post, k_ + "hook_mlp_out": mlp_out})
            resid = resid + mlp_out
            if keep_cache:
                cache[k_ + "hook_resid_post"] = resid
        final = F.layer_norm(resid, (D,), self.lnf_w, self.lnf_b, eps)
        logits = final @ self.w_u                                                    # [pos, d_vocab]
        if keep_cache:
            cache["ln_final.hook_normalized"] = final
            cache["logits"] = logits
            return cache
        return logits


def read_weights(folder):
    """{name: float32 numpy array}, one tensor at a time from the memory-mapped safetensors files
    of a Hugging Face folder (model.safetensors, or the shards its index names): the largest
    memory held beside the float32 weights is one tensor's, not a whole shard's bytes."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for name in files:
        path = os.path.join(folder, name)
        header, start = hsref.read_safetensors_header(path)
        data = np.memmap(path, dtype=np.uint8, mode="r")
        for key, info in header.items():
            if key == "__metadata__":
                continue
            begin, end = (start + o for o in info["data_offsets"])
            raw, shape = data[begin:end], info["shape"]
            if info["dtype"] == "BF16":  # BF16 is the top half of a float32: exact
                x = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << np.uint32(16)).view(np.float32)
            elif info["dtype"] == "F16":
                x = np.frombuffer(raw, dtype="<f2").astype(np.float32)
            elif info["dtype"] == "F32":
                x = np.array(np.frombuffer(raw, dtype="<f4"))
            else:
                raise SystemExit(f"torch_bench: {path}: tensor {key} is {info['dtype']}, not F32/F16/BF16")
            out[key] = x.reshape(shape)
        del data
    return out


def layer_windows(c: dict, model_type: str, n_layer: int):
    """Each layer's sliding window in keys (0: global), by Hugging Face's rules: config.json's
    layer_types when present; Gemma 2 slides on even layers (Gemma2Attention: `not bool(layer_idx
    % 2)`); Qwen2/Qwen3 slide on layers >= max_window_layers when use_sliding_window is set
    (configuration_qwen3.py: sliding_window is None otherwise)."""
    if model_type in ("qwen2", "qwen3"):
        window = c.get("sliding_window", 4096) if c.get("use_sliding_window", False) else None
    elif model_type == "gemma2":
        window = c.get("sliding_window", 4096)
    else:
        window = None
    if window is None:
        return [0] * n_layer
    if c.get("layer_types"):
        sliding = [t == "sliding_attention" for t in c["layer_types"]]
    elif model_type == "gemma2":
        sliding = [i % 2 == 0 for i in range(n_layer)]
    else:
        sliding = [i >= c.get("max_window_layers", 28) for i in range(n_layer)]
    return [int(window) if s else 0 for s in sliding]


class TorchLlama:
    """Llama, Qwen2, Qwen3 and Gemma 2 (RMSNorm, rotary in Hugging Face's rotate-half layout,
    grouped-query attention, gated MLP) from a Hugging Face folder, float32, with
    TransformerLens's cache names for these models (hook_rot_q / hook_rot_k, ln*.hook_scale,
    mlp.hook_pre / hook_pre_linear, k and v with n_key_value_heads heads). q/k/v are one matrix,
    gate/up another, so each projection is one GEMM, stored in one of two layouts (`layout`,
    changed in place by set_layout): "out_in", nn.Linear's [out, in] as read from the file, the
    products through F.linear, as Hugging Face runs them, a tied unembedding the embedding itself;
    or "in_out", every matrix transposed once to [in, out] and contiguous (a tied unembedding its
    own copy), the products plain `x @ w`. Which is faster depends on the shape (OpenBLAS packs
    the two differently); main() times both and keeps the faster. W_O is [head, d_head, d_model]
    in both, for the per-head results' batched product.

    Qwen3 adds q_norm / k_norm over d_head before the rotation (attn.q_norm.* / attn.k_norm.*,
    modeling_qwen3.py Qwen3Attention.forward). Gemma 2 (modeling_gemma2.py) adds: the embedding
    times float32(sqrt(d_model)) (hook_embed is the scaled row); the norms' (1 + w), folded into
    the float32 weight once (Gemma2RMSNorm: output * (1.0 + weight.float())); norms after
    attention and after the MLP (ln1_post / ln2_post: hook_result is before it, hook_attn_out
    and hook_mlp_out after); scores times query_pre_attn_scalar^-1/2, then divided by the cap,
    tanh, times the cap, then the mask (eager_attention_forward); the final soft-cap on the logits
    (Gemma2ForCausalLM.forward). A sliding layer's query q reads keys q - W < k <= q
    (Gemma2DecoderLayer's tril(ones, diagonal=-sliding_window) mask)."""

    LINEAR = ("w_qkv", "w_gate_up", "w_down")  # the per-layer matrices set_layout turns

    def __init__(self, folder):
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
            c = json.load(f)
        mt = c.get("model_type", "llama")
        self.gemma = mt == "gemma2"
        self.qk_norm = mt == "qwen3"
        self.D, self.L = c["hidden_size"], c["num_hidden_layers"]
        self.H, self.KV = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
        self.dh = c.get("head_dim") or self.D // self.H
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.n_ctx = c.get("max_position_embeddings", 2048)
        self.d_vocab = c["vocab_size"]
        self.act = _ACT[(c.get("hidden_activation") or "gelu_pytorch_tanh") if self.gemma else c.get("hidden_act", "silu")]
        if c.get("rope_scaling"):
            raise SystemExit("torch_bench: rope_scaling is not implemented here (the benchmark shapes have none)")
        # configuration_gemma2.py's defaults: query_pre_attn_scalar 256, soft-caps 50 and 30
        self.attn_scale = (c.get("query_pre_attn_scalar", 256) ** -0.5) if self.gemma else 1.0 / math.sqrt(self.dh)
        self.attn_cap = c.get("attn_logit_softcapping", 50.0) if self.gemma else None
        self.final_cap = c.get("final_logit_softcapping", 30.0) if self.gemma else None
        # Gemma2Model.forward: torch.tensor(hidden_size ** 0.5, dtype=hidden_states.dtype), float32 here
        self.embed_scale = torch.tensor(self.D ** 0.5, dtype=torch.float32) if self.gemma else None
        self.windows = layer_windows(c, mt, self.L)
        w = read_weights(folder)
        t = lambda name: torch.from_numpy(w.pop(name))  # noqa: E731
        norm = (lambda name: 1.0 + t(name)) if self.gemma else t  # noqa: E731
        self.layout = "out_in"  # as read; set_layout turns it when asked
        self.embed = t("model.embed_tokens.weight")                                  # [d_vocab, d_model]
        self.tied = "lm_head.weight" not in w
        self.w_u = self.embed if self.tied else t("lm_head.weight")                  # [d_vocab, d_model]
        self.norm_w = norm("model.norm.weight")
        self.blocks = []
        for i in range(self.L):
            p = f"model.layers.{i}."
            b = {"ln1": norm(p + "input_layernorm.weight")}
            if self.gemma:
                b.update(ln1_post=norm(p + "post_attention_layernorm.weight"),
                         ln2=norm(p + "pre_feedforward_layernorm.weight"),
                         ln2_post=norm(p + "post_feedforward_layernorm.weight"))
            else:
                b["ln2"] = norm(p + "post_attention_layernorm.weight")
            if self.qk_norm:
                b.update(q_norm=t(p + "self_attn.q_norm.weight"), k_norm=t(p + "self_attn.k_norm.weight"))
            b.update({"w_qkv": torch.cat([t(p + f"self_attn.{x}_proj.weight") for x in "qkv"], dim=0),
                      "w_o_h": t(p + "self_attn.o_proj.weight").t().contiguous().view(self.H, self.dh, self.D),
                      "w_gate_up": torch.cat([t(p + "mlp.gate_proj.weight"), t(p + "mlp.up_proj.weight")], dim=0),
                      "w_down": t(p + "mlp.down_proj.weight")})
            b["b_qkv"] = (torch.cat([t(p + f"self_attn.{x}_proj.bias") for x in "qkv"])
                          if p + "self_attn.q_proj.bias" in w else None)
            self.blocks.append(b)
        inv_freq = 1.0 / (c.get("rope_theta", 10000.0) ** (torch.arange(0, self.dh, 2, dtype=torch.float64) / self.dh))
        angles = torch.arange(self.n_ctx, dtype=torch.float64)[:, None] * inv_freq[None, :]
        emb = torch.cat([angles, angles], dim=-1)
        self.cos, self.sin = emb.cos().float(), emb.sin().float()                     # [n_ctx, d_head]
        self.masks = {}  # (n_pos, window) -> additive mask, made once per prompt length

    def set_layout(self, layout: str):
        """Turns every projection matrix to `layout` ("out_in" or "in_out"), one at a time, so
        the process holds one extra matrix at most while it does."""
        if layout not in LAYOUTS:
            raise ValueError(f"unknown layout {layout!r}")
        if layout == self.layout:
            return
        for b in self.blocks:
            for name in self.LINEAR:
                b[name] = b[name].t().contiguous()
        if self.tied:
            self.w_u = self.embed if layout == "out_in" else self.embed.t().contiguous()
        else:
            self.w_u = self.w_u.t().contiguous()
        self.layout = layout

    def lin(self, x, w, bias=None):
        """x times the projection `w` (and `bias`), in the layout `w` is stored in."""
        if self.layout == "out_in":
            return F.linear(x, w, bias)
        return torch.addmm(bias, x, w) if bias is not None else x @ w

    def mask(self, n, window):
        """[query_pos, key_pos] additive mask: -inf above the diagonal and, with a window W,
        where k <= q - W."""
        m = self.masks.get((n, window))
        if m is None:
            m = torch.full((n, n), float("-inf")).triu(1)
            if window:
                m += torch.full((n, n), float("-inf")).tril(-window)
            self.masks[(n, window)] = m
        return m

    def rms(self, x, w):
        scale = (x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt()                   # [..., 1], TL's hook_scale
        return x / scale * w, scale

    def rotate(self, x, cos, sin):                                                   # x [pos, heads, d_head]
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos[:, None, :] + rotated * sin[:, None, :]

    def forward(self, ids, keep_cache: bool):
        n, H, KV, dh, D = ids.numel(), self.H, self.KV, self.dh, self.D
        rep = H // KV
        cache = {}
        resid = self.embed[ids]
        if self.embed_scale is not None:
            resid = resid * self.embed_scale
        if keep_cache:
            cache["hook_embed"] = resid
        cos, sin = self.cos[:n], self.sin[:n]
        for l, b in enumerate(self.blocks):
            k_ = f"blocks.{l}."
            mask = self.mask(n, self.windows[l])
            x, scale1 = self.rms(resid, b["ln1"])
            qkv = self.lin(x, b["w_qkv"], b["b_qkv"])
            q = qkv[:, :H * dh].view(n, H, dh)
            k = qkv[:, H * dh:(H + KV) * dh].view(n, KV, dh)
            v = qkv[:, (H + KV) * dh:].view(n, KV, dh)
            if self.qk_norm:
                qn, q_scale = self.rms(q, b["q_norm"])                                 # [pos, head, d_head], [pos, head, 1]
                kn, k_scale = self.rms(k, b["k_norm"])
                rq, rk = self.rotate(qn, cos, sin), self.rotate(kn, cos, sin)
            else:
                rq, rk = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
            # grouped-query attention: query head h reads key/value head h // rep
            rk_h = rk.transpose(0, 1).repeat_interleave(rep, dim=0)                   # [head, pos, d_head]
            v_h = v.transpose(0, 1).repeat_interleave(rep, dim=0)
            if self.attn_cap is None:  # scale and causal mask in one kernel: mask + scale * q @ k^T
                scores = torch.baddbmm(mask, rq.transpose(0, 1), rk_h.transpose(1, 2), alpha=self.attn_scale)
            else:  # the soft-cap comes between the scale and the mask
                scores = torch.bmm(rq.transpose(0, 1), rk_h.transpose(1, 2))          # [head, q, k]
                scores.mul_(self.attn_scale).div_(self.attn_cap).tanh_().mul_(self.attn_cap).add_(mask)
            pattern = torch.softmax(scores, dim=-1)
            z_hqd = torch.bmm(pattern, v_h)                                           # [head, pos, d_head]
            if keep_cache:
                result_hqm = torch.bmm(z_hqd, b["w_o_h"])                             # [head, pos, d_model]
                attn_out = result_hqm.sum(0)
                cache.update({k_ + "hook_resid_pre": resid, k_ + "ln1.hook_scale": scale1,
                              k_ + "ln1.hook_normalized": x, k_ + "attn.hook_q": q, k_ + "attn.hook_k": k,
                              k_ + "attn.hook_v": v, k_ + "attn.hook_rot_q": rq, k_ + "attn.hook_rot_k": rk,
                              k_ + "attn.hook_attn_scores": scores, k_ + "attn.hook_pattern": pattern,
                              k_ + "attn.hook_z": z_hqd.transpose(0, 1),
                              k_ + "attn.hook_result": result_hqm.transpose(0, 1)})
                if self.qk_norm:
                    cache.update({k_ + "attn.q_norm.hook_scale": q_scale, k_ + "attn.q_norm.hook_normalized": qn,
                                  k_ + "attn.k_norm.hook_scale": k_scale, k_ + "attn.k_norm.hook_normalized": kn})
            else:
                attn_out = z_hqd.transpose(0, 1).reshape(n, H * dh) @ b["w_o_h"].view(H * dh, D)
            if self.gemma:
                attn_out, scale_p = self.rms(attn_out, b["ln1_post"])
                if keep_cache:
                    cache.update({k_ + "ln1_post.hook_scale": scale_p, k_ + "ln1_post.hook_normalized": attn_out})
            if keep_cache:
                cache[k_ + "hook_attn_out"] = attn_out
            resid = resid + attn_out
            x, scale2 = self.rms(resid, b["ln2"])
            gate_up = self.lin(x, b["w_gate_up"])                                     # [pos, 2 d_mlp]
            pre, pre_linear = gate_up.chunk(2, dim=-1)
            post = self.act(pre) * pre_linear
            mlp_out = self.lin(post, b["w_down"])
            if self.gemma:
                mlp_out, scale_p2 = self.rms(mlp_out, b["ln2_post"])
            if keep_cache:
                cache.update({k_ + "hook_resid_mid": resid, k_ + "ln2.hook_scale": scale2,
                              k_ + "ln2.hook_normalized": x, k_ + "mlp.hook_pre": pre,
                              k_ + "mlp.hook_pre_linear": pre_linear, k_ + "mlp.hook_post": post,
                              k_ + "hook_mlp_out": mlp_out})
                if self.gemma:
                    cache.update({k_ + "ln2_post.hook_scale": scale_p2, k_ + "ln2_post.hook_normalized": mlp_out})
            resid = resid + mlp_out
            if keep_cache:
                cache[k_ + "hook_resid_post"] = resid
        final, scale_f = self.rms(resid, self.norm_w)
        logits = self.lin(final, self.w_u)                                            # [pos, d_vocab]
        if self.final_cap is not None:
            logits.div_(self.final_cap).tanh_().mul_(self.final_cap)
        if keep_cache:
            cache.update({"ln_final.hook_scale": scale_f, "ln_final.hook_normalized": final, "logits": logits})
            return cache
        return logits


LAYOUTS = ("out_in", "in_out")  # TorchLlama.set_layout


def choose_layout(model, wanted: str, ids, keep: bool, warmup: int):
    """The layout the timed passes use, and {layout: [ms of its probe passes]}. With "best" (a
    TorchLlama), max(warmup, 2) passes run in each layout before anything is timed, and the one
    whose passes after the first have the lower median is kept: the yardstick runs the way
    PyTorch is faster on this shape. These passes come before the peak-RSS reset, so
    run_peak_rss_mb is the chosen layout's; peak_rss_mb includes both."""
    if not isinstance(model, TorchLlama):
        return None, None
    if wanted != "best":
        model.set_layout(wanted)
        return wanted, None
    probe = {}
    with torch.inference_mode():
        for layout in LAYOUTS:
            model.set_layout(layout)
            times = []
            for _ in range(max(warmup, 2)):
                t0 = time.perf_counter()
                out = model.forward(ids, keep_cache=keep)
                times.append((time.perf_counter() - t0) * 1e3)
                del out
            probe[layout] = [round(t, 3) for t in times]
    best = min(LAYOUTS, key=lambda layout: statistics.median(probe[layout][1:]))
    model.set_layout(best)
    return best, probe


def load_torch_model(folder):
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        model_type = json.load(f).get("model_type", "gpt2")
    if model_type in ("llama", "qwen2", "qwen3", "gemma2"):
        m = TorchLlama(folder)
        return m, m.n_ctx, m.d_vocab
    m = TorchGPT2(folder)
    return m, m.c.n_ctx, m.c.d_vocab


def _status_mb(field: str):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Passes:
    """The passes of a process: --warmup untimed, then --runs timed (`for i in Passes(args, times)`;
    i >= args.warmup is a timed pass). Past --max-seconds no new pass starts once `times` has one
    (stopped_early says so); out of time while warming up, it goes straight to one timed pass."""

    def __init__(self, args, times):
        self.args, self.times, self.stopped_early = args, times, False

    def __iter__(self):
        a, t0, i = self.args, time.perf_counter(), 0
        while i < a.warmup + a.runs:
            if a.max_seconds and time.perf_counter() - t0 > a.max_seconds:
                if self.times:
                    self.stopped_early = True
                    return
                i = max(i, a.warmup)
            yield i
            i += 1


def blas_info():
    """The BLAS and OpenMP libraries torch runs on, with the kernel OpenBLAS chose (threadpoolctl)."""
    try:
        import threadpoolctl
    except ImportError:
        return "threadpoolctl not installed (apt install python3-threadpoolctl)"
    return [{k: i.get(k) for k in ("internal_api", "version", "architecture", "threading_layer", "num_threads")}
            for i in threadpoolctl.threadpool_info()]


def bench_tokens(n: int, d_vocab: int):
    return np.random.default_rng(12345).integers(0, d_vocab, n).tolist()


def patch_main(args, model, weights, tokens, load_ms) -> int:
    """--mode patch: the sweep as a TransformerLens notebook runs it (hsref.patching_sweep)."""
    corrupt = list(tokens)
    if len(corrupt) > 1:
        corrupt[1] = (corrupt[1] + 1) % model.config.d_vocab
    reset_ok = _reset_peak_rss()
    times, cpu_times = [], []
    cells = 0
    passes = Passes(args, times)
    with torch.inference_mode():
        for i in passes:
            c0 = time.process_time()
            t0 = time.perf_counter()
            r = hsref.patching_sweep(model, tokens, corrupt, args.answer, args.wrong, args.what,
                                     dtype=torch.float32, weights=weights)
            dt = (time.perf_counter() - t0) * 1e3
            cpu = (time.process_time() - c0) * 1e3
            cells = int(r["raw"].size)
            if i >= args.warmup:
                times.append(dt)
                cpu_times.append(cpu)
    print(json.dumps({
        "median_ms": round(statistics.median(times), 3) if times else None,
        "min_ms": round(min(times), 3) if times else None,
        "runs": [round(t, 3) for t in times],
        "cpu_median_ms": round(statistics.median(cpu_times), 3) if cpu_times else None,
        "cpu_runs": [round(t, 3) for t in cpu_times],
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "run_peak_rss_mb": round(_status_mb("VmHWM"), 1) if reset_ok else None,
        "mode": "patch", "what": args.what, "patched_runs": cells, "tokens": len(tokens),
        "threads": args.threads, "stopped_early": passes.stopped_early, "load_ms": round(load_ms, 1),
        "torch": torch.__version__,
    }))
    return 0


# The ways --mode grad keeps every hook's gradient, TransformerLens-style (retain_grad on every
# hook's activation, then backward from the metric; HookPoint backward hooks see the same tensors):
#   frozen   the weights need no gradient (as after model.requires_grad_(False)): autograd
#            computes only what reaches the activations; the embeddings are the leaves.
#   params   the weights require gradients, as a HookedTransformer's nn.Parameters do by default:
#            backward also accumulates every weight's gradient (zeroed between passes, untimed).
GRAD_STYLES = ("frozen", "params")


def _weight_tensors(model):
    """Every weight tensor of a TorchGPT2 (the blocks' and the model's own), by attribute."""
    owners = [model] + list(model.blocks)
    return [(o, name) for o in owners for name, v in vars(o).items()
            if isinstance(v, torch.Tensor) and v.is_floating_point() and name not in ("mask", "w_o_h")]


def grad_main(args, model, tokens, load_ms) -> int:
    """--mode grad: the gradient of logit(answer) - logit(wrong) at the last position at every
    cache key, timed per pass: the forward pass keeping the cache, retain_grad on every key's
    tensor, the metric, backward, and the {key: gradient} dict in TransformerLens's layouts."""
    if not isinstance(model, TorchGPT2):
        raise SystemExit("torch_bench: --mode grad is written for GPT-2 folders")
    weights = _weight_tensors(model)
    if args.grad_style == "params":
        for owner, name in weights:
            getattr(owner, name).requires_grad_(True)
        for b in model.blocks:  # the per-head view of W_O, now on the autograd path to w_o
            b.w_o_h = b.w_o.view(model.c.n_head, model.c.d_head, model.c.d_model)
    head_major = ("attn.hook_z", "attn.hook_result")
    ids = torch.tensor(tokens, dtype=torch.long)
    n = len(tokens)
    reset_ok = _reset_peak_rss()
    times, cpu_times, backward_times = [], [], []
    keys = floats = 0
    metric = None
    passes = Passes(args, times)
    with torch.enable_grad():
        for i in passes:
            for owner, name in weights:  # model.zero_grad(), outside the timed region
                getattr(owner, name).grad = None
            c0 = time.process_time()
            t0 = time.perf_counter()
            cache = model.forward(ids, keep_cache=True, grad=True)
            for t in cache.values():
                if not t.is_leaf:
                    t.retain_grad()
            m = cache["logits"][n - 1, args.answer] - cache["logits"][n - 1, args.wrong]
            t1 = time.perf_counter()
            m.backward()
            grads = {k: (t.grad.transpose(0, 1) if k.endswith(head_major) else t.grad) for k, t in cache.items()}
            dt = (time.perf_counter() - t0) * 1e3
            bt = (time.perf_counter() - t1) * 1e3
            cpu = (time.process_time() - c0) * 1e3
            missing = [k for k, g in grads.items() if g is None]
            if missing:
                raise SystemExit(f"torch_bench: no gradient reached {missing[:3]}")
            keys, floats, metric = len(grads), sum(g.numel() for g in grads.values()), float(m)
            del cache, grads, m
            if i >= args.warmup:
                times.append(dt)
                backward_times.append(bt)
                cpu_times.append(cpu)
    print(json.dumps({
        "median_ms": round(statistics.median(times), 3) if times else None,
        "min_ms": round(min(times), 3) if times else None,
        "runs": [round(t, 3) for t in times],
        "backward_median_ms": round(statistics.median(backward_times), 3) if backward_times else None,
        "cpu_median_ms": round(statistics.median(cpu_times), 3) if cpu_times else None,
        "cpu_runs": [round(t, 3) for t in cpu_times],
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "run_peak_rss_mb": round(_status_mb("VmHWM"), 1) if reset_ok else None,
        "mode": "grad", "grad_style": args.grad_style, "grad_keys": keys, "grad_floats": floats,
        "metric": metric, "tokens": n, "threads": args.threads, "stopped_early": passes.stopped_early,
        "load_ms": round(load_ms, 1), "torch": torch.__version__,
    }))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--tokens", type=int, default=20, help="prompt length (deterministic ids)")
    parser.add_argument("--token-ids", help="comma-separated ids to use instead of --tokens")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--mode", choices=("cache", "logits", "patch", "grad"), default="cache")
    parser.add_argument("--grad-style", choices=GRAD_STYLES, default="frozen",
                        help="--mode grad: whether the weights require gradients too (see GRAD_STYLES)")
    parser.add_argument("--what", choices=sorted(hsref.PATCH_SITES), default="resid_pre")
    parser.add_argument("--answer", type=int, default=11)
    parser.add_argument("--wrong", type=int, default=13)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--max-seconds", type=float, default=0,
                        help="start no new pass after this long (at least one timed pass runs)")
    parser.add_argument("--dump", help="write one cache-mode run to OUT.npz (hsref format)")
    parser.add_argument("--layout", choices=("best",) + LAYOUTS, default="best",
                        help="Llama family: the projection matrices' layout; best times both (see choose_layout)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    t_load = time.perf_counter()
    if args.mode == "patch":
        ref = hsref.load_gpt2(args.model)
        weights = hsref.torch_weights(ref, torch.float32)
        load_ms = (time.perf_counter() - t_load) * 1e3
        tokens = ([int(t) for t in args.token_ids.split(",") if t.strip()] if args.token_ids
                  else bench_tokens(args.tokens, ref.config.d_vocab))
        return patch_main(args, ref, weights, tokens, load_ms)
    model, n_ctx, d_vocab = load_torch_model(args.model)
    load_ms = (time.perf_counter() - t_load) * 1e3
    if args.token_ids:
        tokens = [int(t) for t in args.token_ids.split(",") if t.strip()]
    else:
        tokens = bench_tokens(args.tokens, d_vocab)
    if not 1 <= len(tokens) <= n_ctx:
        print(f"torch_bench: need 1..{n_ctx} tokens, got {len(tokens)}", file=sys.stderr)
        return 2
    if args.mode == "grad":
        return grad_main(args, model, tokens, load_ms)
    ids = torch.tensor(tokens, dtype=torch.long)
    keep = args.mode == "cache"
    layout, layout_ms = choose_layout(model, args.layout, ids, keep, args.warmup)
    rss_after_load_mb = _status_mb("VmRSS")
    reset_ok = _reset_peak_rss()
    times, cpu_times = [], []
    passes = Passes(args, times)
    with torch.inference_mode():
        if args.dump:
            cache = model.forward(ids, keep_cache=True)
            hsref.save_cache(args.dump, hsref.cache_to_float32(cache, tokens))
            del cache
        for i in passes:
            c0 = time.process_time()
            t0 = time.perf_counter()
            out = model.forward(ids, keep_cache=keep)
            dt = (time.perf_counter() - t0) * 1e3
            cpu = (time.process_time() - c0) * 1e3  # all threads; see hs_bench_row.cpp
            del out
            if i >= args.warmup:
                times.append(dt)
                cpu_times.append(cpu)
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB
    run_peak_rss_mb = _status_mb("VmHWM") if reset_ok else None
    print(json.dumps({
        "median_ms": round(statistics.median(times), 3) if times else None,
        "min_ms": round(min(times), 3) if times else None,
        "runs": [round(t, 3) for t in times],
        "cpu_median_ms": round(statistics.median(cpu_times), 3) if cpu_times else None,
        "cpu_runs": [round(t, 3) for t in cpu_times],
        "peak_rss_mb": round(peak_rss_mb, 1),
        "rss_after_load_mb": round(rss_after_load_mb, 1) if rss_after_load_mb else None,
        "run_peak_rss_mb": round(run_peak_rss_mb, 1) if run_peak_rss_mb else None,
        "mode": args.mode, "tokens": len(tokens), "threads": args.threads, "stopped_early": passes.stopped_early,
        "load_ms": round(load_ms, 1), "torch": torch.__version__,
        "layout": layout, "layout_probe_ms": layout_ms,
        "malloc": os.environ.get("GLIBC_TUNABLES") or "glibc default", "blas": blas_info(),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
