#!/usr/bin/python3
"""Train the built-in GPT-2-architecture model (HeadScope tiny) on the corpus of prepare_data.py.

    /usr/bin/python3 tools/train/train.py --work /tmp/headscope-train --tok DIR_WITH_VOCAB_AND_MERGES

Writes WORK/run/: log.jsonl (train loss every --log-every steps, probes every --probe-every
steps), ckpt.pt (model + optimizer + RNG, every --ckpt-every steps; a rerun resumes from it),
final.pt (float32 weights at the end).

Length: --tokens (default 12M); the learning-rate schedule follows the step. --minutes of wall
time (default 86) stops a run that would overrun: on a free 2-core machine (~3,500 tokens/s) the
12M tokens take under an hour; when the cores are shared (compilers...) the time limit may end it
earlier, with fewer tokens.

Training mix (each sequence is context+1 = 257 tokens; next-token loss):
  * 50% natural text: a random window of the training token stream (documents joined by
    <|endoftext|>).
  * 30% random-token repeats: <|endoftext|>, then blocks until full; a block is a span of
    uniformly random token ids (length 8..96, ids in [0, vocab-2]) repeated 2 or 3 times. The loss
    on the first copy of every random span is masked out (it cannot be predicted).
  * 20% repeated natural text: a natural window whose span (length 16..120) starting at a random
    point is repeated 2 or 3 times in a row, then the rest filled with the natural text that
    follows the window.
Optimizer: AdamW(betas 0.9/0.95, weight decay 0.1 on the layers' matrices, 0 on embeddings,
biases and LayerNorm), linear warmup, the peak rate held for --hold (60%) of training, then cosine
decay to 10% of the peak, gradient clipping at 1.0.
Everything is seeded (--seed); torch uses 2 threads.
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
import bpe  # noqa: E402
from gpt2 import GPT2, Config  # noqa: E402


def tokenize_file(tok, path, cache):
    if os.path.exists(cache):
        return np.load(cache)
    text = open(path, encoding="utf-8").read()
    ids = np.array(tok.encode(text), dtype=np.uint16)
    np.save(cache, ids)
    return ids


class Sampler:
    def __init__(self, data, ctx, vocab, eot, rng, p_rand=0.3, p_nat_rep=0.2, p_short=0.0):
        self.data = data
        self.n = ctx + 1
        self.vocab = vocab
        self.eot = eot
        self.rng = rng
        self.p_rand = p_rand
        self.p_nat_rep = p_nat_rep
        self.p_short = p_short

    def natural(self, n):
        s = self.rng.integers(0, len(self.data) - n - 1)
        return self.data[s:s + n].astype(np.int64)

    def sample(self):
        n = self.n
        u = self.rng.random()
        mask = np.ones(n, dtype=np.float32)  # loss mask on the *target* token at each index
        if u < self.p_rand:
            seq = [self.eot]
            m = [0.0]
            short = self.rng.random() < self.p_short
            while len(seq) < n:
                if short:  # a span of 4-12 tokens repeated until the sequence is full
                    L = int(self.rng.integers(4, 13))
                    k = n
                else:
                    L = int(self.rng.integers(8, 97))
                    k = int(self.rng.integers(2, 4))
                span = self.rng.integers(0, self.vocab - 1, size=L).tolist()
                seq += span * k
                m += [0.0] * L + [1.0] * (L * (k - 1))
            seq, mask = np.array(seq[:n], dtype=np.int64), np.array(m[:n], dtype=np.float32)
        elif u < self.p_rand + self.p_nat_rep:
            base = self.natural(n)
            L = int(self.rng.integers(16, 121))
            k = int(self.rng.integers(2, 4))
            start = int(self.rng.integers(0, max(1, n - L * k)))
            pre = base[:start + L]
            rep = np.concatenate([base[start:start + L]] * (k - 1))
            post = base[start + L:]
            seq = np.concatenate([pre, rep, post])[:n]
        else:
            seq = self.natural(n)
        return seq, mask

    def batch(self, B):
        xs, ms = zip(*[self.sample() for _ in range(B)])
        x = torch.from_numpy(np.stack(xs))
        m = torch.from_numpy(np.stack(ms))
        return x[:, :-1], x[:, 1:], m[:, 1:]


def splitmix64(seed):
    """The documented PRNG used for head-score probe sequences (see head_scores.py)."""
    M = (1 << 64) - 1
    state = seed & M
    while True:
        state = (state + 0x9E3779B97F4A7C15) & M
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
        yield z ^ (z >> 31)


@torch.no_grad()
def probe(model, cfg, held, eot):
    """Cheap progress probes: held-out loss on 8 windows, induction / prev-token maxima."""
    model.eval()
    T = cfg.n_positions
    losses = []
    for i in range(8):
        s = (len(held) - T - 1) * i // 8
        x = torch.from_numpy(held[s:s + T + 1].astype(np.int64))[None]
        lg = model(x[:, :-1])
        losses.append(torch.nn.functional.cross_entropy(lg[0], x[0, 1:]).item())
    g = splitmix64(0)
    n = 50
    rnd = torch.tensor([[next(g) % (cfg.vocab_size - 1) for _ in range(n)] for _ in range(4)])
    seq = torch.cat([torch.full((4, 1), eot), rnd, rnd], dim=1)
    _, pats = model(seq, want_patterns=True)
    q = torch.arange(n + 1, 2 * n + 1)
    ind = max(p[:, :, q, q - n + 1].mean(dim=(0, 2)).max().item() for p in pats)
    x = torch.from_numpy(np.concatenate([[eot], held[:200]]).astype(np.int64))[None]
    _, pats = model(x, want_patterns=True)
    q = torch.arange(2, x.shape[1])
    prev = max(p[0][:, q, q - 1].mean(dim=1).max().item() for p in pats)
    model.train()
    return float(np.mean(losses)), ind, prev


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default=os.environ.get("HEADSCOPE_TRAIN_WORK", "/tmp/headscope-train"))
    ap.add_argument("--tok", required=True, help="folder with vocab.json and merges.txt")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--tokens", type=float, default=12e6, help="training tokens (batch*ctx*steps)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--hold", type=float, default=0.6,
                    help="fraction of training at the peak learning rate (after warmup) before the "
                         "cosine decay starts: the induction phase change needs a high rate")
    ap.add_argument("--wd-embed", action="store_true", help="also decay the embeddings")
    ap.add_argument("--pos-scale", type=float, default=0.03)
    ap.add_argument("--p-rand", type=float, default=0.3)
    ap.add_argument("--p-nat-rep", type=float, default=0.2)
    ap.add_argument("--p-short", type=float, default=0.0,
                    help="fraction of the random-repeat sequences made of one short span (4-12 tokens) "
                         "repeated until full: copying from such a context pays at once, which trains the "
                         "copying circuit that induction heads are built from")
    ap.add_argument("--init", help="start from the weights of this checkpoint (a fresh optimizer and "
                                   "schedule): the second stage of retrain.sh")
    ap.add_argument("--run-name", default="run", help="folder under --work for the log and checkpoints")
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--probe-every", type=int, default=200)
    ap.add_argument("--ckpt-every", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--minutes", type=float, default=86.0,
                    help="wall-time limit of the training loop: training stops there even if tokens remain "
                         "(the schedule itself follows the step)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    run = os.path.join(args.work, args.run_name)
    os.makedirs(run, exist_ok=True)

    tok = bpe.Tokenizer(args.tok)
    V = len(tok.vocab)
    eot = tok.eot
    corpus = os.path.join(args.work, "corpus")
    train_ids = tokenize_file(tok, os.path.join(corpus, "train.txt"), os.path.join(run, "train_ids.npy"))
    held_ids = tokenize_file(tok, os.path.join(corpus, "heldout.txt"), os.path.join(run, "heldout_ids.npy"))
    print("train tokens %d, heldout tokens %d, vocab %d" % (len(train_ids), len(held_ids), V), flush=True)

    cfg = Config(vocab_size=V, n_positions=args.ctx, n_embd=args.d_model, n_layer=args.layers,
                 n_head=args.heads, eos_token_id=eot)
    model = GPT2(cfg)
    model.init_weights(pos_scale=args.pos_scale)
    if args.init:
        model.load_state_dict(torch.load(args.init)["model"])
        print("weights from %s" % args.init, flush=True)
    n_params = sum(p.numel() for p in model.parameters())
    print("parameters: %d" % n_params, flush=True)

    # Embeddings (wte, tied to the unembedding, and wpe) are not decayed: most of the 4,095 ids
    # appear only in the random-repeat spans, and decaying them shrank exactly the directions an
    # induction head has to copy (session 1's run formed no induction head in 12M tokens).
    def decayed(name, p):
        return p.dim() >= 2 and (args.wd_embed or not name.startswith(("wte.", "wpe.")))
    decay = [p for n, p in model.named_parameters() if decayed(n, p)]
    no_decay = [p for n, p in model.named_parameters() if not decayed(n, p)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    steps = int(math.ceil(args.tokens / (args.batch * args.ctx)))
    rng = np.random.default_rng(args.seed)
    sampler = Sampler(train_ids, args.ctx, V, eot, rng, args.p_rand, args.p_nat_rep, args.p_short)

    start_step, elapsed0 = 0, 0.0
    ckpt_path = os.path.join(run, "ckpt.pt")
    if os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        start_step = ck["step"]
        elapsed0 = ck["elapsed"]
        rng.bit_generator.state = ck["np_rng"]
        torch.set_rng_state(ck["torch_rng"])
        print("resumed at step %d" % start_step, flush=True)
        logf = os.path.join(run, "log.jsonl")
        if os.path.exists(logf):  # forget log lines written after the checkpoint
            keep = [l for l in open(logf) if l.strip() and json.loads(l)["step"] <= start_step]
            with open(logf, "w") as f:
                f.writelines(keep)

    budget = args.minutes * 60.0

    # The schedule follows the step alone, so that a run is the same step for step however busy
    # the machine is; --minutes only stops a run that would overrun (session 2: a schedule that
    # followed wall time too started its decay at 5.3M tokens on a shared machine, before the
    # induction heads had formed).
    def progress(s):
        return min(1.0, (s - args.warmup) / max(1, steps - args.warmup))

    def lr_at(s):
        if s < args.warmup:
            return args.lr * (s + 1) / args.warmup
        p = progress(s)
        if p <= args.hold:
            return args.lr
        p = (p - args.hold) / (1.0 - args.hold)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))

    log = open(os.path.join(run, "log.jsonl"), "a")
    t0 = time.time()
    model.train()
    acc_loss, acc_n = 0.0, 0
    for step in range(start_step, steps):
        lr = lr_at(step)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y, m = sampler.batch(args.batch)
        logits = model(x)
        lt = torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1), reduction="none")
        loss = (lt * m.reshape(-1)).sum() / m.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        acc_loss += loss.item()
        acc_n += 1
        done = step + 1
        elapsed = elapsed0 + time.time() - t0
        if done % args.log_every == 0:
            rec = {"step": done, "tokens": done * args.batch * args.ctx, "loss": acc_loss / acc_n,
                   "lr": lr, "elapsed": elapsed,
                   "tok_per_s": (done - start_step) * args.batch * args.ctx / (time.time() - t0)}
            acc_loss, acc_n = 0.0, 0
            if done % args.probe_every == 0 or done == steps:
                hl, ind, prev = probe(model, cfg, held_ids, eot)
                rec.update({"heldout_loss": hl, "max_induction": ind, "max_prev_token": prev})
            log.write(json.dumps(rec) + "\n")
            log.flush()
            print(json.dumps(rec), flush=True)
        stop = elapsed >= budget and done < steps
        if done % args.ckpt_every == 0 or done == steps or stop:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": done,
                        "elapsed": elapsed, "np_rng": rng.bit_generator.state,
                        "torch_rng": torch.get_rng_state(), "config": cfg.hf_dict(),
                        "args": vars(args)}, ckpt_path + ".tmp")
            os.replace(ckpt_path + ".tmp", ckpt_path)
        if stop:
            print("stopping at step %d: the --minutes budget is used up" % done, flush=True)
            steps = done
            break
    torch.save({"model": model.state_dict(), "config": cfg.hf_dict(), "args": vars(args),
                "steps": steps, "tokens": steps * args.batch * args.ctx,
                "elapsed": elapsed0 + time.time() - t0}, os.path.join(run, "final.pt"))
    print("done: %d steps, %.0f s" % (steps, elapsed0 + time.time() - t0), flush=True)


if __name__ == "__main__":
    main()
