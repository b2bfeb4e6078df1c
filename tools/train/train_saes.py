#!/usr/bin/python3
"""Train the SAE and the transcoders shipped with the built-in model (issue 25, item 6).

    /usr/bin/python3 tools/train/train_saes.py collect --work WORK
    /usr/bin/python3 tools/train/train_saes.py train --work WORK --unit sae|tc0|tc1|tc2|tc3
    /usr/bin/python3 tools/train/sae_card.py --work WORK     (evaluation + SAE_CARD.md)

(tools/train/retrain_saes.sh runs everything.) Inputs: WORK/run/train_ids.npy, the tokenized
training text of prepare_data.py + train.py (retrain_saes.sh makes it if missing), and the shipped
model resources/models/headscope-tiny (F16 weights upcast to float32).

collect: --contexts (5,900) contexts drawn without replacement (seed 0) from the consecutive
  255-token chunks of the training stream, each run as <|endoftext|> (BOS) + 255 tokens = 256
  positions, exactly as HeadScope runs a prompt. Every position is kept, BOS included (in this
  model the BOS position's activations are not outliers: its share of the variance is 0.1-0.4% at
  every hook, so it is trained on like any other position and the app can encode every position).
  Activations are stored as float16 memmaps in WORK/saes/acts/: blocks.2.hook_resid_pre and, per
  layer L, blocks.L.ln2.hook_normalized and blocks.L.hook_mlp_out.

train: see train_unit's docstring. Output: a SAELens v6 folder in
  resources/models/headscope-tiny/saes/<name>/ and WORK/saes/<unit>.json (log, timings).
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2 import load_model_dir  # noqa: E402
from sae_common import forward_hooks, write_saelens  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL = os.path.join(ROOT, "resources", "models", "headscope-tiny")
SAES = os.path.join(MODEL, "saes")
CTX = 256
N_LAYERS = 4

UNITS = {"sae": ("resid_pre_2", "blocks.2.hook_resid_pre", None)}
for _L in range(N_LAYERS):
    UNITS["tc%d" % _L] = ("transcoder_%d" % _L, "blocks.%d.ln2.hook_normalized" % _L,
                          "blocks.%d.hook_mlp_out" % _L)
HOOKS = ["blocks.2.hook_resid_pre"] + [h for L in range(N_LAYERS) for h in
                                       ("blocks.%d.ln2.hook_normalized" % L, "blocks.%d.hook_mlp_out" % L)]


def chunks_with_bos(ids, bos, T=CTX - 1):
    """The consecutive T-token chunks of a token stream, each with BOS first (full chunks only)."""
    n = len(ids) // T
    return np.concatenate([np.full((n, 1), bos, dtype=np.int64),
                           ids[:n * T].astype(np.int64).reshape(n, T)], axis=1)


@torch.no_grad()
def collect(args):
    torch.manual_seed(0)
    model, cfg = load_model_dir(args.model, torch.float32)
    ids = np.load(os.path.join(args.work, "run", "train_ids.npy"))
    chunks = chunks_with_bos(ids, cfg.eos_token_id)
    rng = np.random.default_rng(0)
    pick = np.sort(rng.choice(len(chunks), size=min(args.contexts, len(chunks)), replace=False))
    out = os.path.join(args.work, "saes", "acts")
    os.makedirs(out, exist_ok=True)
    N = len(pick) * CTX
    mm = {h: np.lib.format.open_memmap(os.path.join(out, h + ".npy"), mode="w+", dtype=np.float16,
                                       shape=(N, cfg.n_embd)) for h in HOOKS}
    t0 = time.time()
    B = 16
    for s in range(0, len(pick), B):
        x = torch.from_numpy(chunks[pick[s:s + B]])
        _, cache = forward_hooks(model, x, capture=set(HOOKS))
        for h in HOOKS:
            mm[h][s * CTX:(s + len(x)) * CTX] = cache[h].reshape(-1, cfg.n_embd).numpy().astype(np.float16)
        if (s // B) % 20 == 0:
            print("collect %d/%d contexts, %.0f s" % (s + len(x), len(pick), time.time() - t0), flush=True)
    for m in mm.values():
        m.flush()
    meta = {"contexts": int(len(pick)), "positions": int(N), "context_size": CTX,
            "train_chunks": int(len(chunks)), "train_tokens": int(len(ids)),
            "seconds": time.time() - t0, "hooks": HOOKS}
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta))


class JumpReLUFn(torch.autograd.Function):
    """SAELens's JumpReLU (sae_lens/saes/jumprelu_sae.py): x * (x > threshold); the input gets
    the plain gradient where active, the threshold the rectangle-kernel pseudo-derivative
    (Rajamanoharan et al. 2024)."""

    @staticmethod
    def forward(ctx, x, threshold, bandwidth):
        ctx.save_for_backward(x, threshold)
        ctx.bandwidth = bandwidth
        return x * (x > threshold)

    @staticmethod
    def backward(ctx, g):
        x, threshold = ctx.saved_tensors
        bw = ctx.bandwidth
        rect = (((x - threshold) / bw).abs() < 0.5).to(x.dtype)
        return (x > threshold) * g, (-(threshold / bw) * rect * g).sum(0), None


class StepFn(torch.autograd.Function):
    """Heaviside step (x > threshold) with the threshold's pseudo-derivative, for the L0 penalty."""

    @staticmethod
    def forward(ctx, x, threshold, bandwidth):
        ctx.save_for_backward(x, threshold)
        ctx.bandwidth = bandwidth
        return (x > threshold).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        x, threshold = ctx.saved_tensors
        bw = ctx.bandwidth
        rect = (((x - threshold) / bw).abs() < 0.5).to(x.dtype)
        return None, (-(1.0 / bw) * rect * g).sum(0), None


def load_acts(work, hook):
    return np.load(os.path.join(work, "saes", "acts", hook + ".npy"), mmap_mode="r")


def norm_scale(a, rng, n=200000):
    """sqrt(d / E||a||^2) on a sample: activations times this have mean squared norm d."""
    rows = np.sort(rng.choice(len(a), size=min(n, len(a)), replace=False))
    s = np.asarray(a[rows], dtype=np.float64)
    return float(math.sqrt(a.shape[1] / (s ** 2).sum(1).mean()))


def train_unit(args):
    """TopK training, then (transcoders only) JumpReLU fine-tuning.

    Activations are scaled so their mean squared norm is d_model (input and output each; the
    scale is folded into the stored weights). Decoder rows are kept at unit norm (renormalized
    after every step). Phase 1, all units: TopK (k latents, ReLU on the kept values, as SAELens's
    TopK), loss = sum of squared errors per position (mean over the batch) + AuxK (OpenAI, Gao et
    al. 2024: the top d_in/2 latents among those dead for --dead-window positions reconstruct the
    residual error; coefficient 1/16, scaled down by min(1, dead / (d_in/2))). Adam (0.9, 0.999),
    linear warmup over 50 steps, constant, then linear decay to 0 over the last 20% of phase 1.
    Phase 2, transcoders (--jump-frac of the steps): the activation becomes SAELens's JumpReLU
    with one threshold per latent (initialized to the global value that gives L0 = k on 16,384
    training positions; parameterized as log threshold), trained with the straight-through
    pseudo-derivatives of Rajamanoharan et al. 2024 (rectangle kernel, bandwidth 0.2 x the
    initial threshold) and an L0 penalty lambda * L0 whose lambda follows the batch L0 to
    --l0-target (lambda *= exp(0.2 (L0 - target) / target) each step); learning rate
    lr/2 decaying linearly to 0. At the end all thresholds are shifted by one common factor so the
    L0 on 65,536 training positions equals --l0-target (never the held-out text).
    """
    name, hook_in, hook_out = UNITS[args.unit]
    is_tc = hook_out is not None
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    t_load = time.time()
    X = np.ascontiguousarray(load_acts(args.work, hook_in))
    Y = np.ascontiguousarray(load_acts(args.work, hook_out)) if is_tc else X
    N, d_in = X.shape
    d_out = Y.shape[1]
    s_in = norm_scale(X, rng)
    s_out = norm_scale(Y, rng) if is_tc else s_in
    print("%s: %d positions, loaded in %.0f s, s_in %.4f s_out %.4f" % (
        args.unit, N, time.time() - t_load, s_in, s_out), flush=True)

    def batch(rows):
        x = torch.from_numpy(X[rows].astype(np.float32)) * s_in
        y = torch.from_numpy(Y[rows].astype(np.float32)) * s_out if is_tc else x
        return x, y

    d_sae, k = args.d_sae, args.k
    W_dec = torch.randn(d_sae, d_out)
    W_dec /= W_dec.norm(dim=1, keepdim=True)
    if is_tc:
        W_enc = torch.randn(d_in, d_sae)
        W_enc /= W_enc.norm(dim=0, keepdim=True)
    else:
        W_enc = W_dec.t().clone()
    sample = np.sort(rng.choice(N, size=min(100000, N), replace=False))
    _, ys = batch(sample)
    b_dec = ys.mean(0).clone()
    b_enc = torch.zeros(d_sae)
    P = {"W_enc": W_enc, "b_enc": b_enc, "W_dec": W_dec, "b_dec": b_dec}
    for v in P.values():
        v.requires_grad_(True)
    opt = torch.optim.Adam(list(P.values()), lr=args.lr, betas=(0.9, 0.999))

    total = int(args.tokens // args.batch)
    jump_at = int(total * (1 - args.jump_frac)) if is_tc else total
    dead_window = args.dead_window
    last_fired = torch.zeros(d_sae, dtype=torch.long)  # position counter of the last firing
    seen = 0
    log = []
    t0 = time.time()
    perm = rng.permutation(N)
    pi = 0
    phase = "topk"
    log_thr = lam = bw = None
    step = 0
    stop_reason = "tokens"

    def encode_pre(x):
        xin = x - P["b_dec"] if not is_tc else x
        return xin @ P["W_enc"] + P["b_enc"]

    while step < total:
        elapsed = time.time() - t0
        if elapsed > args.minutes * 60:
            stop_reason = "time limit"
            break
        # the schedule follows the step only (reproducible); --minutes is a hard stop
        prog = step / total
        if pi + args.batch > N:
            perm = rng.permutation(N)
            pi = 0
        rows = np.sort(perm[pi:pi + args.batch])
        pi += args.batch
        x, y = batch(rows)

        if phase == "topk" and is_tc and prog >= jump_at / total:
            # switch to JumpReLU
            phase = "jumprelu"
            with torch.no_grad():
                cal, _ = batch(np.sort(rng.choice(N, size=16384, replace=False)))
                pre = encode_pre(cal)
                tau = float(pre.flatten().kthvalue(pre.numel() - k * pre.shape[0]).values)
            log_thr = torch.full((d_sae,), math.log(tau), requires_grad=True)
            bw = 0.2 * tau
            lam = args.l0_lambda0
            opt = torch.optim.Adam(list(P.values()) + [log_thr], lr=args.lr / 2, betas=(0.9, 0.999))
            jump_prog0 = prog
            print("switch to JumpReLU at step %d: tau %.4f bandwidth %.4f" % (step, tau, bw), flush=True)

        if phase == "topk":
            p1_end = jump_at / total
            lr = args.lr * min(1.0, (step + 1) / 50)
            if prog > 0.8 * p1_end:
                lr *= max(0.0, (p1_end - prog) / (0.2 * p1_end))
        else:
            lr = args.lr / 2 * max(0.0, (1 - prog) / (1 - jump_prog0))
        for g in opt.param_groups:
            g["lr"] = lr

        pre = encode_pre(x)
        if phase == "topk":
            v, idx = torch.topk(pre, k, dim=-1, sorted=False)
            acts = torch.zeros_like(pre).scatter(-1, idx, v.relu())
        else:
            thr = log_thr.exp()
            acts = JumpReLUFn.apply(pre, thr, bw)
        recon = acts @ P["W_dec"] + P["b_dec"]
        err = recon - y
        mse = err.pow(2).sum(-1).mean()
        loss = mse
        fired = (acts > 0).any(0)
        seen += len(rows)
        last_fired[fired] = seen
        dead = (seen - last_fired) > dead_window
        if seen <= dead_window:
            dead[:] = False
        n_dead = int(dead.sum())
        aux = torch.tensor(0.0)
        if n_dead > 0 and phase == "topk":
            k_aux = min(d_in // 2, n_dead)
            scale = min(n_dead / (d_in // 2), 1.0)
            auxp = torch.where(dead[None], pre, torch.full_like(pre, -float("inf")))
            av, ai = torch.topk(auxp, k_aux, dim=-1, sorted=False)
            aux_acts = torch.zeros_like(pre).scatter(-1, ai, av.relu())
            e_hat = aux_acts @ P["W_dec"]
            aux = (e_hat - (-err).detach()).pow(2).sum(-1).mean()
            loss = loss + args.aux_coef * scale * aux
        l0 = None
        if phase == "jumprelu":
            l0 = StepFn.apply(pre, thr, bw).sum(-1).mean()
            loss = loss + lam * l0
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            P["W_dec"] /= P["W_dec"].norm(dim=1, keepdim=True)
            if phase == "jumprelu":
                l0v = float(l0)
                lam *= math.exp(0.2 * (l0v - args.l0_target) / args.l0_target)
        if step % 25 == 0 or step == total - 1:
            with torch.no_grad():
                ev = 1 - err.pow(2).sum() / (y - y.mean(0)).pow(2).sum()
            r = {"step": step, "tokens": seen, "phase": phase, "lr": lr, "mse": float(mse),
                 "ev_batch": float(ev), "aux": float(aux), "dead": n_dead,
                 "l0": float((acts > 0).float().sum(-1).mean()), "lambda": lam,
                 "elapsed": time.time() - t0}
            log.append(r)
            print(json.dumps(r), flush=True)
        step += 1
    train_seconds = time.time() - t0

    final_shift = 1.0
    with torch.no_grad():
        if is_tc:
            if phase != "jumprelu":
                raise SystemExit("the loop ended before the JumpReLU phase; give it more time")
            cal_rows = np.sort(rng.choice(N, size=65536, replace=False))
            cal, _ = batch(cal_rows)
            pre = encode_pre(cal)
            thr = log_thr.exp()

            def l0_at(c):
                return float((pre > thr * c).float().sum(-1).mean())
            lo, hi = 0.25, 4.0
            for _ in range(40):
                mid = math.sqrt(lo * hi)
                if l0_at(mid) > args.l0_target:
                    lo = mid
                else:
                    hi = mid
            final_shift = hi
            print("final threshold factor %.4f: training L0 %.2f -> %.2f" % (
                final_shift, l0_at(1.0), l0_at(final_shift)), flush=True)
            thr = thr * final_shift
            # fold the input/output scales (see the card): unit decoder rows kept
            tensors = {"W_enc": (P["W_enc"] * (s_in / s_out)).numpy(),
                       "b_enc": (P["b_enc"] / s_out).numpy(),
                       "W_dec": P["W_dec"].numpy(),
                       "b_dec": (P["b_dec"] / s_out).numpy(),
                       "threshold": (thr / s_out).numpy()}
        else:
            tensors = {"W_enc": P["W_enc"].numpy(),
                       "b_enc": (P["b_enc"] / s_in).numpy(),
                       "W_dec": P["W_dec"].numpy(),
                       "b_dec": (P["b_dec"] / s_in).numpy()}
    meta = json.load(open(os.path.join(args.work, "saes", "acts", "meta.json")))
    md = {"sae_lens_version": "6.0.0", "sae_lens_training_version": None,
          "model_name": "headscope-tiny", "hook_name": hook_in}
    if is_tc:
        md["hook_name_out"] = hook_out
    md.update({"hook_head_index": None, "context_size": CTX, "prepend_bos": True,
               "exclude_special_tokens": False,
               "dataset_path": "headscope-tiny training text (tools/train/prepare_data.py)",
               "trained_by": "tools/train/train_saes.py (HeadScope), not SAELens"})
    cfg = {"d_in": d_in, "d_sae": d_sae, "dtype": "float32", "device": "cpu",
           "apply_b_dec_to_input": not is_tc, "normalize_activations": "none",
           "reshape_activations": "none", "metadata": md}
    if is_tc:
        cfg["d_out"] = d_out
        cfg["architecture"] = "jumprelu_transcoder"
    else:
        cfg["k"] = k
        cfg["rescale_acts_by_decoder_norm"] = False
        cfg["architecture"] = "topk"
    folder = os.path.join(args.out, name)
    write_saelens(folder, cfg, tensors)
    info = {"unit": args.unit, "folder": name, "hook_in": hook_in, "hook_out": hook_out,
            "args": vars(args), "steps": step, "tokens_seen": seen, "train_seconds": train_seconds,
            "stop_reason": stop_reason, "s_in": s_in, "s_out": s_out, "positions": N,
            "contexts": meta["contexts"], "final_threshold_factor": final_shift,
            "torch": torch.__version__, "log": log}
    with open(os.path.join(args.work, "saes", args.unit + ".json"), "w") as f:
        json.dump(info, f, indent=1)
    print("wrote %s in %.1f minutes (%d steps, %d positions)" % (folder, train_seconds / 60, step, seen))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--work", required=True)
    c.add_argument("--model", default=MODEL)
    c.add_argument("--contexts", type=int, default=5900)
    t = sub.add_parser("train")
    t.add_argument("--work", required=True)
    t.add_argument("--unit", required=True, choices=sorted(UNITS))
    t.add_argument("--out", default=SAES)
    t.add_argument("--d-sae", type=int, default=2048)
    t.add_argument("--k", type=int, default=32)
    t.add_argument("--batch", type=int, default=2048)
    t.add_argument("--lr", type=float, default=5e-4)
    t.add_argument("--tokens", type=float, default=3e6, help="training positions seen (incl. repeats)")
    t.add_argument("--minutes", type=float, default=20.0, help="wall-time limit of the loop")
    t.add_argument("--jump-frac", type=float, default=0.3,
                   help="transcoders: fraction of steps spent fine-tuning as JumpReLU")
    t.add_argument("--l0-target", type=float, default=28.0, help="transcoders: JumpReLU L0 target")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--aux-coef", type=float, default=1 / 16)
    t.add_argument("--dead-window", type=int, default=200000, help="positions without firing = dead")
    t.add_argument("--l0-lambda0", type=float, default=0.5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.cmd == "collect":
        collect(args)
    else:
        train_unit(args)


if __name__ == "__main__":
    main()
