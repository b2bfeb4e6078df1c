#!/usr/bin/env python3
"""Re-creates docs/induction-walkthrough.md's pictures and numbers from the built-in model.

  /usr/bin/python3 tools/examples/induction_walkthrough.py [--build build]

Runs headscope-cli (heads, run --ablate, patch, circuits) and the app's headless export
(headscope --export, with --head, --ablate and the patching inputs), copies the figures the page
shows into docs/images/induction/ and prints every number the page quotes, so that the page can
be checked against a fresh build. Needs numpy (Debian: python3-numpy) for the losses.
"""
import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
# A sentence the model has never seen, twice: the second copy can only be predicted by looking
# back at the first (the "repeated random tokens" of the induction-head literature, as text so
# that the window can show it).
SENTENCE = "The vivid walrus juggles seven copper kites near Oslo."
PROMPT = f"{SENTENCE} {SENTENCE}"
# Patching: the clean prompt stops inside the second copy, before " seven"; the corrupted one
# says " eight" in the first copy. Same number of tokens; the metric is logit(seven) - logit(eight).
CLEAN = "The vivid walrus juggles seven copper kites near Oslo. The vivid walrus juggles"
CORRUPT = "The vivid walrus juggles eight copper kites near Oslo. The vivid walrus juggles"
ANSWER, WRONG = " seven", " eight"


def run(*args, **kw):
    out = subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True, **kw)
    return out.stdout


def losses(npz_path, n_copy):
    """Mean next-token loss (nats) over each copy: BOS, then two copies of n_copy tokens."""
    d = np.load(npz_path)
    logits = d["logits"].astype(np.float64)
    tokens = d["tokens"].astype(np.int64)
    m = logits.max(-1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(-1, keepdims=True))
    nll = -logp[np.arange(len(tokens) - 1), tokens[1:]]  # nll[i]: predicting token i+1
    # Within each copy, every token but the copy's first is predicted (the first of the second
    # copy follows the first copy's end, not a repeat yet).
    first = nll[1:n_copy].mean()
    second = nll[n_copy + 1: 2 * n_copy].mean()
    return first, second


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    args = ap.parse_args()
    cli = pathlib.Path(args.build) / "app" / "headscope-cli"
    app = pathlib.Path(args.build) / "app" / "headscope"
    images = ROOT / "docs" / "images" / "induction"
    images.mkdir(parents=True, exist_ok=True)

    tokens = json.loads(run(cli, "tokenize", "--text", PROMPT))
    n = len(tokens["ids"])
    # Alike but for the first token ("The" at the start, " The" after the period).
    assert n % 2 == 0 and tokens["ids"][1: n // 2] == tokens["ids"][n // 2 + 1:], "the copies must tokenize alike"
    n_copy = n // 2
    print(f"prompt: {n} tokens + BOS, two copies of {n_copy}")

    # 1. The detectors on this prompt.
    heads = json.loads(run(cli, "heads", "--text", PROMPT))
    print("\n## 1. detectors (heads --text)")
    print("| head | previous-token | duplicate-token | induction |")
    print("| --- | ---: | ---: | ---: |")
    shown = [h for h in heads["heads"] if (h["induction"] or 0) > 0.3 or (h["previous_token"] or 0) > 0.3]
    for h in shown:
        print(f"| {h['head']} | {h['previous_token']:.2f} | {h['duplicate_token']:.2f} | {h['induction']:.2f} |")
    inductive = [h["head"] for h in heads["heads"] if (h["induction"] or 0) > 0.5]
    print("induction heads (score > 0.5):", ", ".join(inductive))

    # 2. Ablations and the loss of each copy.
    def dotted(label):  # "L3H2" -> "3.2"
        layer, head = label[1:].split("H")
        return f"{layer}.{head}"

    cases = [("none", None), ("L3H2", "3.2"), ("every induction head", ",".join(dotted(h) for h in inductive)),
             ("L0H2 (previous-token)", "0.2"), ("L0H2, mean-ablated", "0.2:mean")]
    print("\n## 2. ablation (run --ablate): mean loss per token, nats")
    print("| ablated | first copy | second copy |")
    print("| --- | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in cases:
            out = pathlib.Path(tmp) / "run.npz"
            extra = ["--ablate", spec] if spec else []
            run(cli, "run", "--text", PROMPT, *extra, "-o", out)
            first, second = losses(out, n_copy)
            print(f"| {name} ({spec or '-'}) | {first:.2f} | {second:.2f} |")

    # 3. Patching.
    print("\n## 3. patching (patch): normalized effect")
    with tempfile.TemporaryDirectory() as tmp:
        for what in ("resid_pre", "z"):
            out = pathlib.Path(tmp) / f"{what}.json"
            run(cli, "patch", "--clean", CLEAN, "--corrupt", CORRUPT, "--answer", ANSWER, "--wrong", WRONG,
                "--what", what, "-o", out)
            d = json.loads(out.read_text())
            a = np.array(d["normalized"], dtype=float)
            if what == "resid_pre":
                print(f"metric clean {d['metric_clean']:.2f}, corrupt {d['metric_corrupt']:.2f}")
                for layer in range(a.shape[0]):
                    top = np.argsort(-np.abs(a[layer]))[:2]
                    print(f"resid_pre L{layer}: " + ", ".join(f"pos {p}: {a[layer, p]:.2f}" for p in top))
            else:
                order = np.dstack(np.unravel_index(np.argsort(-a.ravel()), a.shape))[0][:6]
                print("z, largest: " + ", ".join(f"L{l}H{h} {a[l, h]:.2f}" for l, h in order))
                print(f"z, layer 3 sum: {a[3].sum():.2f}")

    # 4. Circuits.
    print("\n## 4. circuits (circuits --head): copying score of the full OV circuit")
    with tempfile.TemporaryDirectory() as tmp:
        for head in ["0.2", "3.2"] + [dotted(h) for h in inductive if h != "L3H2"]:
            out = pathlib.Path(tmp) / "c.json"
            run(cli, "circuits", "--head", head, "-o", out)
            print(f"L{head.replace('.', 'H')}: {json.loads(out.read_text())['copying_score']:.3f}")

    # The pictures: the app's own exports.
    wanted = {
        ("--head", "3.2"): {"heads_overview.png": "overview.png", "attention_L3H2.png": "attention_L3H2.png",
                            "circuits_L3H2.png": "circuits_L3H2.png"},
        ("--head", "0.2"): {"attention_L0H2.png": "attention_L0H2.png", "circuits_L0H2.png": "circuits_L0H2.png"},
        ("--head", "3.2", "--ablate", "0.2"): {"attention_L3H2.png": "attention_L3H2_without_L0H2.png"},
    }
    for options, files in wanted.items():
        with tempfile.TemporaryDirectory() as tmp:
            run(app, "--text", PROMPT, *options, "--export", tmp)
            for src, dst in files.items():
                shutil.copyfile(pathlib.Path(tmp) / src, images / dst)
    with tempfile.TemporaryDirectory() as tmp:
        run(app, "--text", CLEAN, "--corrupt", CORRUPT, "--answer", ANSWER, "--wrong", WRONG, "--export", tmp)
        for name in ("patching_resid_pre.png", "patching_z.png"):
            shutil.copyfile(pathlib.Path(tmp) / name, images / name)
        # What each head writes towards the predicted next token at the last position.
        dla = sorted(pathlib.Path(tmp).glob("contributions_dla_pos*.png"))
        shutil.copyfile(dla[0], images / "dla_last_position.png")
    print("\nwrote", ", ".join(sorted(p.name for p in images.iterdir())), "to", images.relative_to(ROOT))


if __name__ == "__main__":
    sys.exit(main())
