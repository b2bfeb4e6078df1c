#!/usr/bin/python3
"""The held-out passages the built-in model's unit dashboards are built from.

    /usr/bin/python3 tools/train/make_dashboard_text.py [--work WORK] [--out FILE]

Writes `resources/models/headscope-tiny/heldout.jsonl`: the built-in model's held-out text
(prepare_data.py's split: the last 2.5% of every source, never trained on by the model, its
tokenizer or its SAEs and transcoders), cut into passages of whole paragraphs, one JSON object a
line: {"text": passage, "source": name}. `headscope-cli scan --input` reads it as it is (the
`source` field is ignored), and the app's "Build dashboards" uses it.

Only the public-domain sources are written (the World English Bible, Austen, Melville, Dickens,
Verne, Wells, the Jargon File): the fortune files are BSD-licensed, and redistributing their text
would need their notices, so they are left out of what the repository carries.

Passages: consecutive paragraphs of one document joined with a blank line while the passage stays
at most MAX_CHARS characters (about 240 tokens of this tokenizer at 3.3 characters a token, so a
passage fits the model's 256-token context with BOS); a paragraph longer than that is split after
a sentence end ('. ', '? ', '! ') before MAX_CHARS, or at a space when it has none. Deterministic:
the same packages give the same file.
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prepare_data  # noqa: E402

MAX_CHARS = 780
PUBLIC_DOMAIN = ("web_bible", "austen", "moby_dick", "tidytext_books", "jargon")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def split_long(paragraph):
    """Pieces of at most MAX_CHARS, cut after a sentence end where there is one."""
    pieces = []
    while len(paragraph) > MAX_CHARS:
        window = paragraph[:MAX_CHARS]
        ends = [m.end() for m in re.finditer(r"[.?!][\"')]?\s", window)]
        cut = ends[-1] if ends and ends[-1] > MAX_CHARS // 3 else window.rfind(" ") + 1
        if cut <= 0:
            cut = MAX_CHARS
        pieces.append(paragraph[:cut].rstrip())
        paragraph = paragraph[cut:].lstrip()
    if paragraph:
        pieces.append(paragraph)
    return pieces


def passages(document):
    out, cur = [], ""
    for para in document.split("\n\n"):
        for piece in split_long(para.strip()):
            if cur and len(cur) + 2 + len(piece) > MAX_CHARS:
                out.append(cur)
                cur = ""
            cur = piece if not cur else cur + "\n\n" + piece
    if cur:
        out.append(cur)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default=os.environ.get("HEADSCOPE_TRAIN_WORK", "/tmp/headscope-train"))
    ap.add_argument("--out", default=os.path.join(ROOT, "resources/models/headscope-tiny/heldout.jsonl"))
    args = ap.parse_args()
    xdir, _ = prepare_data.fetch(args.work)
    lines, chars = [], 0
    for name, _pkg, fn in prepare_data.SOURCES:
        if name not in PUBLIC_DOMAIN:
            continue
        _train, held = prepare_data.split_heldout(fn(xdir))
        n = 0
        for doc in held:
            for p in passages(doc):
                lines.append(json.dumps({"text": p, "source": name}, ensure_ascii=False))
                chars += len(p)
                n += 1
        print("%-15s %5d passages" % (name, n))
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("%d passages, %d characters -> %s" % (len(lines), chars, args.out))


if __name__ == "__main__":
    main()
