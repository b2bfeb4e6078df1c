#!/usr/bin/python3
"""Evaluate the shipped SAE and transcoders on held-out text and write their SAE_CARD.md.

    /usr/bin/python3 tools/train/sae_card.py --work WORK

Every number comes from the files as stored (F16 weights upcast to float32, SAELens's encode and
decode: sae_common.StoredSAE) and the model's stored F16 weights upcast to float32, on the held-out
token stream WORK/run/heldout_ids.npy (never trained on, neither by the model nor by the SAEs),
cut as make_card.py cuts it: consecutive chunks of 255 tokens, each run with BOS first (the last,
partial chunk too), so every held-out token is predicted once.

Per unit, over ALL positions of those runs (BOS positions included, N below):
  L0           mean number of non-zero latents per position;
  EV           1 - sum_pos ||t - t_hat||^2 / sum_pos ||t - mean_pos(t)||^2, t the target
               activation (the SAE's input, or a transcoder's MLP output), mean over all N
               positions (one global formula, not a per-batch average);
  dead         fraction of latents that are zero at every one of the N positions;
  spliced loss next-token cross-entropy with the unit's output replacing its (output) hook at
               every position, no error term; "all transcoders": the four replace the four MLP
               outputs at once (each reads ln2.hook_normalized of the run so modified).
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2 import load_model_dir  # noqa: E402
from sae_common import StoredSAE, forward_hooks  # noqa: E402
from train_saes import MODEL, SAES, UNITS  # noqa: E402

ORDER = ["sae", "tc0", "tc1", "tc2", "tc3"]


def heldout_batches(held, bos, T=255, B=16):
    full = len(held) // T
    chunks = [np.concatenate([[bos], held[i * T:(i + 1) * T]]) for i in range(full)]
    out = [np.stack(chunks[s:s + B]) for s in range(0, full, B)]
    if len(held) > full * T:
        out.append(np.concatenate([[bos], held[full * T:]])[None])
    return [torch.from_numpy(b.astype(np.int64)) for b in out]


def ce_sum(logits, x):
    lp = torch.log_softmax(logits[:, :-1], dim=-1)
    return float(-lp.gather(-1, x[:, 1:, None]).sum()), int(x[:, 1:].numel())


@torch.no_grad()
def evaluate(work, saes=SAES, max_batches=None):
    torch.set_num_threads(1)
    model, cfg = load_model_dir(MODEL, torch.float32)
    held = np.load(os.path.join(work, "run", "heldout_ids.npy"))
    units = {u: StoredSAE(os.path.join(saes, UNITS[u][0])) for u in ORDER}
    batches = heldout_batches(held, cfg.eos_token_id)[:max_batches]
    stat = {u: {"sq_err": 0.0, "sum": torch.zeros(cfg.n_embd, dtype=torch.float64), "sumsq": 0.0,
                "l0": 0.0, "fired": torch.zeros(units[u].cfg["d_sae"], dtype=torch.bool),
                "sq_err_nobos": 0.0, "sum_nobos": torch.zeros(cfg.n_embd, dtype=torch.float64),
                "sumsq_nobos": 0.0, "n_nobos": 0}
            for u in ORDER}
    runs = ["clean"] + ["splice_" + u for u in ORDER] + ["all_tc", "zero_mlps"]
    loss = {r: [0.0, 0] for r in runs}
    npos = 0
    t0 = time.time()

    def splice(unit):
        sae = units[unit]
        if unit == "sae":
            return {sae.hook_in: lambda a, c: sae.decode(sae.encode(a))}
        return {sae.hook_out: lambda a, c: sae.decode(sae.encode(c[sae.hook_in]))}

    caps = set()
    for u in ORDER:
        caps.add(units[u].hook_in)
        caps.add(units[u].hook_out)
    for bi, x in enumerate(batches):
        logits, cache = forward_hooks(model, x, capture=caps)
        l, n = ce_sum(logits, x)
        loss["clean"][0] += l
        loss["clean"][1] += n
        npos += x.numel()
        for u in ORDER:
            sae, s = units[u], stat[u]
            a_in = cache[sae.hook_in].reshape(-1, cfg.n_embd)
            tgt = cache[sae.hook_out].reshape(-1, cfg.n_embd).double()
            acts = sae.encode(a_in)
            out = sae.decode(acts).double()
            s["sq_err"] += float((tgt - out).pow(2).sum())
            s["sum"] += tgt.sum(0)
            s["sumsq"] += float(tgt.pow(2).sum())
            s["l0"] += float((acts != 0).sum())
            s["fired"] |= (acts != 0).any(0)
            nb = (torch.arange(x.shape[1]) != 0).repeat(x.shape[0])
            s["sq_err_nobos"] += float((tgt - out)[nb].pow(2).sum())
            s["sum_nobos"] += tgt[nb].sum(0)
            s["sumsq_nobos"] += float(tgt[nb].pow(2).sum())
            s["n_nobos"] += int(nb.sum())
            lg, _ = forward_hooks(model, x, replace=splice(u))
            l, n = ce_sum(lg, x)
            loss["splice_" + u][0] += l
            loss["splice_" + u][1] += n
        rep = {}
        for u in ORDER[1:]:
            rep.update(splice(u))
        l, n = ce_sum(forward_hooks(model, x, replace=rep)[0], x)
        loss["all_tc"][0] += l
        loss["all_tc"][1] += n
        zero = {"blocks.%d.hook_mlp_out" % L: (lambda a, c: torch.zeros_like(a)) for L in range(cfg.n_layer)}
        l, n = ce_sum(forward_hooks(model, x, replace=zero)[0], x)
        loss["zero_mlps"][0] += l
        loss["zero_mlps"][1] += n
        if bi % 5 == 0:
            print("eval batch %d/%d, %.0f s" % (bi + 1, len(batches), time.time() - t0), flush=True)
    res = {"positions": npos, "heldout_tokens": int(len(held)), "contexts": len(batches) and
           sum(int(b.shape[0]) for b in batches), "seconds": time.time() - t0, "units": {}}
    res["loss"] = {r: v[0] / v[1] for r, v in loss.items()}
    res["predicted_tokens"] = loss["clean"][1]
    for u in ORDER:
        s = stat[u]
        var = s["sumsq"] - float((s["sum"] ** 2).sum()) / npos
        var_nb = s["sumsq_nobos"] - float((s["sum_nobos"] ** 2).sum()) / s["n_nobos"]
        res["units"][u] = {"l0": s["l0"] / npos, "ev": 1 - s["sq_err"] / var,
                           "ev_excluding_bos": 1 - s["sq_err_nobos"] / var_nb,
                           "mse_per_position": s["sq_err"] / npos,
                           "dead_fraction": 1 - float(s["fired"].float().mean()),
                           "dead": int((~s["fired"]).sum()), "d_sae": int(s["fired"].numel()),
                           "spliced_loss": res["loss"]["splice_" + u]}
    return res


def fmt_minutes(s):
    return "%.1f min" % (s / 60)


def write_card(work, res, path, saes=SAES):
    info = {u: json.load(open(os.path.join(work, "saes", u + ".json"))) for u in ORDER}
    meta = json.load(open(os.path.join(work, "saes", "acts", "meta.json")))
    sources = json.load(open(os.path.join(work, "corpus", "sources.json")))
    L = res["loss"]
    size = {}
    for u in ORDER:
        d = os.path.join(saes, UNITS[u][0])
        size[u] = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    rows = []
    targets = []
    for u in ORDER:
        r = res["units"][u]
        name, hin, hout = UNITS[u]
        arch = json.load(open(os.path.join(saes, name, "cfg.json")))["architecture"]
        if u == "sae":
            ok = r["ev"] >= 0.8 and r["l0"] <= 32 and r["dead_fraction"] < 0.10
            tgt = "EV >= 0.8, L0 <= 32, dead < 10%"
        else:
            ok = r["ev"] >= 0.7 and r["l0"] <= 32
            tgt = "EV >= 0.7, L0 <= 32"
        targets.append(ok)
        rows.append("| `%s/` | %s | `%s`%s | %.2f | %.3f | %.3f | %.2f%% (%d) | %.4f | %+.4f | %s |" % (
            name, arch, hin, "" if hout is None else " -> `%s`" % hout, r["l0"], r["ev"],
            r["ev_excluding_bos"], 100 * r["dead_fraction"], r["dead"], r["spliced_loss"],
            r["spliced_loss"] - L["clean"], ("met" if ok else "**not met**") + " (" + tgt + ")"))
    hp = []
    for u in ORDER:
        i = info[u]
        a = i["args"]
        extra = ""
        if u != "sae":
            extra = ("; then JumpReLU fine-tuning for the last %d%% of steps (L0 target %g, final "
                     "threshold factor %.3f)" % (round(100 * a["jump_frac"]), a["l0_target"],
                                                   i["final_threshold_factor"]))
        hp.append("| `%s` | %d | %d | %d | %g | %s | %s | %d | %s%s | %s |" % (
            UNITS[u][0], a["d_sae"], a["k"], a["batch"], a["lr"], "{:,}".format(i["tokens_seen"]),
            "{:,}".format(i["steps"]), a["seed"], fmt_minutes(i["train_seconds"]),
            "" if i["stop_reason"] == "tokens" else " (time limit)", extra.lstrip("; ") or "-"))
    all_ok = all(targets)
    negs = [UNITS[u][0] for u in ORDER if res["units"][u]["spliced_loss"] < L["clean"]]
    neg = " (here: %s)" % ", ".join("`%s`" % n for n in negs) if negs else ""
    src = ", ".join("%s (`%s`)" % (s["source"], s["package"]) for s in sources)
    total_train = sum(info[u]["train_seconds"] for u in ORDER)
    card = f"""# SAE and transcoders for headscope-tiny

A residual-stream sparse autoencoder and one transcoder per MLP for HeadScope's built-in model
(`resources/models/headscope-tiny`), trained by this project with `tools/train/train_saes.py`
(plain PyTorch {torch.__version__}, Debian's `python3-torch`, one thread) on the model's own
training text, and stored in SAELens's v6 disk format so that HeadScope (or SAELens's
`SAE.load_from_disk`) loads them as they are.

## Files

| folder | architecture | hook(s) | d_in -> d_sae -> d_out | size |
| --- | --- | --- | --- | ---: |
""" + "\n".join("| `%s/` | %s | `%s`%s | 256 -> %d -> 256 | %.2f MB |" % (
        UNITS[u][0], json.load(open(os.path.join(saes, UNITS[u][0], "cfg.json")))["architecture"],
        UNITS[u][1], "" if UNITS[u][2] is None else " -> `%s`" % UNITS[u][2],
        info[u]["args"]["d_sae"], size[u] / 1e6) for u in ORDER) + f"""

Total: {sum(size.values()) / 1e6:.2f} MB. Each folder holds `cfg.json` (SAELens v6 fields:
`d_in`, `d_sae`, `d_out` for transcoders, `dtype` "float32" = the dtype to compute in,
`apply_b_dec_to_input`, `normalize_activations` "none", `reshape_activations` "none",
`architecture`, `k` and `rescale_acts_by_decoder_norm` false for the TopK SAE, and `metadata` with
`hook_name`, `hook_name_out` for transcoders, `model_name` "headscope-tiny", `context_size` 256,
`prepend_bos` true, `sae_lens_version` "6.0.0" so that loaders read it as a v6 config) and
`sae_weights.safetensors` with SAELens's tensor names, stored as F16 (upcast to float32 on load,
as SAELens casts to `dtype`):

- TopK SAE: `W_enc` [256, d_sae], `b_enc` [d_sae], `W_dec` [d_sae, 256], `b_dec` [256];
  encode `topk(relu)`: `pre = (x - b_dec) @ W_enc + b_enc`, keep the k largest of `pre` and apply
  ReLU to them, zero elsewhere (`sae_lens/saes/topk_sae.py`); decode `acts @ W_dec + b_dec`.
- JumpReLU transcoders: `W_enc` [256, d_sae], `b_enc` [d_sae], `W_dec` [d_sae, 256], `b_dec` [256],
  `threshold` [d_sae]; encode `pre = x @ W_enc + b_enc`, `acts = relu(pre) * (pre > threshold)`
  (no `b_dec` subtraction: `apply_b_dec_to_input` is false, `sae_lens/saes/transcoder.py`);
  decode `acts @ W_dec + b_dec`, the prediction of `hook_mlp_out`.

Decoder rows have unit norm (as stored in F16). Hooks are TransformerLens's names on the
unprocessed model: `blocks.2.hook_resid_pre` is the input of block 2 (the output of block 1);
`blocks.L.ln2.hook_normalized` is `ln_2`'s output including its weight and bias (the MLP's input);
`blocks.L.hook_mlp_out` the MLP's output including `c_proj`'s bias.

## Data

The model's training text (`WORK/corpus/train.txt` of `tools/train/prepare_data.py`: {src}),
tokenized with the model's tokenizer ({meta["train_tokens"]:,} tokens) and cut into
{meta["train_chunks"]:,} consecutive chunks of 255 tokens; {meta["contexts"]:,} of them, drawn
without replacement with seed 0, were run as `<|endoftext|>` (BOS) + 255 tokens, as HeadScope
runs a prompt: {meta["positions"]:,} positions of activations per hook (float16 on disk,
collected in {fmt_minutes(meta["seconds"])}).

**BOS:** every position is trained on and evaluated, BOS included. In this model the BOS
position is not an outlier (its share of the activations' variance is 0.1-0.4% at every hook used
here; the norm of `blocks.2.hook_resid_pre` is 45 at BOS against 55 on average elsewhere), so
there is no reason to drop it, and the app encodes every position.

Held-out: `WORK/corpus/heldout.txt` (the last 2.5% of every source, never trained on by the model
or by these SAEs), {res["heldout_tokens"]:,} tokens in {res["contexts"]} runs of BOS + up to
255 tokens: N = {res["positions"]:,} positions (BOS included), {res["predicted_tokens"]:,}
predicted tokens.

## Results on held-out text

Computed by `tools/train/sae_card.py` from the files as stored (F16 weights upcast to float32,
SAELens's encode/decode) and the model's stored F16 weights upcast to float32.

- L0: mean number of non-zero latents per position, over the N positions.
- EV (explained variance): `1 - sum_pos ||t - t_hat||^2 / sum_pos ||t - mean(t)||^2` over all N
  positions at once, `t` the SAE's input (for a transcoder: the real `hook_mlp_out`), `t_hat` its
  reconstruction (the transcoder's prediction), `mean(t)` the mean over the N positions. The
  column "EV w/o BOS" is the same over the non-BOS positions.
- dead: latents that are zero at all N = {res["positions"]:,} held-out positions.
- spliced loss: next-token cross-entropy (nats/token) with the unit's output in place of the
  activation at every position, no error term; delta against the clean model.

Clean model loss on these tokens: **{L["clean"]:.4f}** (the model in float32; `MODEL_CARD.md`'s figure
is computed in float64). All four MLP outputs zeroed: {L["zero_mlps"]:.4f}.

| unit | architecture | hook(s) | L0 | EV | EV w/o BOS | dead | spliced loss | delta | target |
| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |
""" + "\n".join(rows) + f"""

A negative delta means the spliced run predicts the held-out text slightly better than the model
itself{neg}; not investigated further (the model's own loss right
after BOS is high, see `MODEL_CARD.md`). Dead latents are a target for the SAE only; the
transcoders' dead fractions are reported as measured.

**All four transcoders replacing the four MLPs at once** (each reading `ln2.hook_normalized` of
the run so modified, no error terms): loss **{L["all_tc"]:.4f}** (clean {L["clean"]:.4f},
delta {L["all_tc"] - L["clean"]:+.4f}; with the MLPs zeroed {L["zero_mlps"]:.4f}, so the
replacement recovers {100 * (L["zero_mlps"] - L["all_tc"]) / (L["zero_mlps"] - L["clean"]):.1f}% of what the MLPs contribute to the loss).

Targets of issue 25 (SAE: EV >= 0.8 at L0 <= 32 with under 10% dead latents; each transcoder:
EV of its MLP output >= 0.7 at L0 <= 32): **{"all met" if all_ok else "not all met"}**.

## Training

`tools/train/train_saes.py train --unit U` (defaults below), seeds fixed (`--seed`, torch and
numpy; data order, initialization and calibration samples all follow from it). Activations are
scaled so that their mean squared norm is d_model = 256 (input and output separately; measured on
200,000 training positions; the scales are folded into the stored weights). Decoder rows are kept
at unit norm.

- TopK phase (all units): keep the k largest pre-activations (ReLU applied to them), loss = sum
  of squared errors per position (mean over the batch) + AuxK (Gao et al. 2024: the top 128 =
  d_in/2 pre-activations among latents that have not fired for {info["sae"]["args"]["dead_window"]:,} training positions
  reconstruct the residual error; coefficient {info["sae"]["args"]["aux_coef"]:g}, scaled by
  min(1, dead/128)). Adam (0.9, 0.999), warmup 50 steps, constant, linear decay to 0 over the
  last 20% of the phase. The SAE's encoder starts as the decoder's transpose, `b_dec` at the mean.
- Transcoders, JumpReLU phase: SAELens has no TopK transcoder, so the TopK transcoder becomes a
  `jumprelu_transcoder`: one threshold per latent, initialized to the global value that gives
  L0 = k on 16,384 training positions, learned (as log threshold) with the straight-through
  pseudo-derivatives of Rajamanoharan et al. 2024 (rectangle kernel, bandwidth 0.2 x the initial
  threshold) and an L0 penalty lambda x L0 whose lambda follows the batch L0 towards the target
  (lambda *= exp(0.2 (L0 - target) / target) every step); all weights keep training (Adam, lr/2
  decaying linearly to 0). Finally all thresholds are multiplied by one common factor so that the
  L0 on 65,536 training positions equals the target (a margin under 32 for held-out text).

| unit | d_sae | k | batch | lr | positions seen | steps | seed | training time | then |
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |
""" + "\n".join(hp) + f"""

Wall time: activations {fmt_minutes(meta["seconds"])}, training {fmt_minutes(total_train)} in
all (two units at a time on a 2-core machine shared with compiles), evaluation
{fmt_minutes(res["seconds"])}.

## Dashboards

Their dashboards (Neuronpedia's layout: how often and how strongly each latent fires, a histogram,
the top 20 contexts, examples from each quantile, the logit effects) are not shipped: over the
held-out text a folder is about 42 MB of JSON per 2,048 latents (126 MB for the model's 4,096
neurons). They are built on first use, in 15-25 s on a 2-core machine, from the held-out passages the
model folder carries, `heldout.jsonl` (`tools/train/make_dashboard_text.py`: the public-domain
sources' held-out text, 564 passages of whole paragraphs, 337,051 characters; the BSD-licensed
fortunes are left out): the Features and Neurons views offer "build these latents' dashboards"
when none is open, run the scan with progress in the status bar, and keep the folder in the app's
data folder, where later sessions find it. The same from a shell:
`headscope-cli scan --model resources/models/headscope-tiny --input
resources/models/headscope-tiny/heldout.jsonl --max-tokens 256 --units
sae:resources/models/headscope-tiny/saes/resid_pre_2 -o resid_pre_2.json`.

## Reproduce

```
tools/train/retrain_saes.sh [WORK_DIR]     # default /tmp/headscope-train
```

It fetches and tokenizes the corpus if missing (`prepare_data.py`; the tokenizer is the shipped
model's), collects the activations, trains the five units and writes this card. The training
loops stop at their position count (the schedule follows the step, not the clock); the
`--minutes` limit ({info["sae"]["args"]["minutes"]:g}) only ends a run on a much slower machine,
which then gives different weights.
"""
    with open(path, "w") as f:
        f.write(card)
    return all_ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", default=os.path.join(SAES, "SAE_CARD.md"))
    args = ap.parse_args()
    res = evaluate(args.work)
    with open(os.path.join(args.work, "saes", "eval.json"), "w") as f:
        json.dump(res, f, indent=1)
    ok = write_card(args.work, res, args.out)
    print(json.dumps(res, indent=1))
    print("targets", "met" if ok else "NOT met")


if __name__ == "__main__":
    main()
