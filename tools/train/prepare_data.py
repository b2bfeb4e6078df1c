#!/usr/bin/python3
"""Fetch public-domain (and permissively licensed) English text from Debian packages and
write the training / held-out corpus for the built-in model.

    /usr/bin/python3 tools/train/prepare_data.py --work /tmp/headscope-train

Packages are fetched with `apt-get download` and unpacked with `dpkg -x` into WORK/debs and
WORK/x (nothing is installed, nothing is committed). Output:

    WORK/corpus/train.txt     documents separated by the literal text <|endoftext|>
    WORK/corpus/heldout.txt   same format; never used for the tokenizer or for training
    WORK/corpus/sources.json  per-source character counts, package versions and licences

Held-out text: the last 2.5% (by characters) of every source, cut at a paragraph boundary.
"""
import argparse
import glob
import gzip
import json
import os
import re
import struct
import subprocess
import sys
import urllib.parse
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rdata  # noqa: E402

EOT = "<|endoftext|>"
HELDOUT_FRACTION = 0.025

PACKAGES = {
    "sword-text-web": "World English Bible (2015 edition with Deuterocanon), public domain",
    "r-cran-janeaustenr": "Jane Austen's six novels (texts public domain; R package MIT)",
    "r-cran-tokenizers": "Herman Melville, Moby Dick (text public domain; R package MIT)",
    "r-cran-tidytext": "Dickens' Great Expectations, Verne's Twenty Thousand Leagues under the Sea, "
                       "Wells' The War of the Worlds (texts public domain; R package MIT)",
    "jargon-text": "The Jargon File 4.4.7 (public domain)",
    "fortunes": "fortune-mod data files, selected categories (BSD per Debian copyright file)",
}

# Fortune files used (others skipped: ascii art, non-English, offensive-leaning or Debian-specific).
FORTUNE_FILES = [
    "computers", "cookie", "definitions", "education", "food", "goedel", "humorists", "kids",
    "law", "linux", "love", "magic", "medicine", "miscellaneous", "news", "paradoxum", "people",
    "pets", "platitudes", "politics", "pratchett", "science", "songs-poems", "sports",
    "startrek", "tao", "wisdom", "work", "zippy",
]


def run(cmd, **kw):
    subprocess.run(cmd, check=True, **kw)


def fetch(work):
    debs = os.path.join(work, "debs")
    xdir = os.path.join(work, "x")
    os.makedirs(debs, exist_ok=True)
    os.makedirs(xdir, exist_ok=True)
    versions = {}
    for pkg in PACKAGES:
        have = glob.glob(os.path.join(debs, pkg + "_*.deb"))
        if not have:
            run(["apt-get", "download", pkg], cwd=debs)
            have = glob.glob(os.path.join(debs, pkg + "_*.deb"))
        deb = sorted(have)[-1]
        versions[pkg] = urllib.parse.unquote(os.path.basename(deb).split("_")[1])
        dest = os.path.join(xdir, pkg)
        if not os.path.isdir(dest):
            run(["dpkg", "-x", deb, dest])
    return xdir, versions


def normalize(text):
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\ufeff", "")
    text = (text.replace("\u2018", "'").replace("\u2019", "'")
            .replace("\u201c", '"').replace("\u201d", '"'))
    text = text.replace("\t", "    ").replace("\u00a0", " ")
    text = re.sub(r"[^\x08]\x08", "", text)  # overstrike (fortunes)
    text = re.sub(r"[\x00-\x09\x0b-\x1f\x7f]", "", text)
    return text


def unwrap(text):
    """Join hard-wrapped lines into one line per paragraph; paragraphs separated by a blank line."""
    paras = re.split(r"\n\s*\n", text)
    out = []
    for p in paras:
        p = " ".join(line.strip() for line in p.split("\n") if line.strip())
        p = re.sub(r"[ ]{2,}", " ", p)
        if p:
            out.append(p)
    return "\n\n".join(out)


def strip_gutenberg(text):
    start = re.search(r"\*\*\* ?START OF (THIS|THE) PROJECT GUTENBERG[^\n]*\n", text)
    if start:
        text = text[start.end():]
    end = re.search(r"\*\*\* ?END OF (THIS|THE) PROJECT GUTENBERG", text)
    if end:
        text = text[:end.start()]
    end = re.search(r"\nEnd of (the )?Project Gutenberg", text)
    if end:
        text = text[:end.start()]
    return text


def src_web(xdir):
    base = os.path.join(xdir, "sword-text-web/usr/share/sword/modules/texts/ztext/engWEB2015eb")
    docs = []
    for testament in ("ot", "nt"):
        bzs = open(os.path.join(base, testament + ".bzs"), "rb").read()
        bzz = open(os.path.join(base, testament + ".bzz"), "rb").read()
        for i in range(len(bzs) // 12):
            off, size, _ = struct.unpack_from("<III", bzs, i * 12)
            block = zlib.decompress(bzz[off:off + size]).decode("utf-8")
            # one block is one book
            # footnotes are dropped; the text often has no space around them ("Christ,<note/>the")
            block = re.sub(r"<note\b.*?</note>", "\x01", block, flags=re.S)
            block = re.sub(r"<title\b[^>]*>(.*?)</title>", r"\n\n\1\n\n", block, flags=re.S)
            block = re.sub(r"<div\b[^>]*type=\"x-p\"[^>]*/>", "\n\n", block)
            block = re.sub(r"<chapter\b[^>]*sID[^>]*/>", "\n\n", block)
            block = re.sub(r"<lb\b[^>]*/>", "\n", block)
            block = re.sub(r"<l\b[^>]*/>", "\n", block)
            block = re.sub(r"<[^>]+>", "", block)
            block = re.sub(r"(\S)\x01+(?=[A-Za-z\u201c\u2018\"'(])", r"\1 ", block)
            block = block.replace("\x01", "")
            block = block.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
            block = block.replace("&quot;", '"').replace("&apos;", "'")
            block = unwrap(normalize(block))
            if len(block) > 200:
                docs.append(block)
    return docs


def src_austen(xdir):
    d = rdata.load_lazy(os.path.join(
        xdir, "r-cran-janeaustenr/usr/lib/R/site-library/janeaustenr/data/Rdata"))
    docs = []
    for name in ("sensesensibility", "prideprejudice", "mansfieldpark", "emma",
                 "northangerabbey", "persuasion"):
        lines = rdata.unvec(d[name])
        docs.append(unwrap(normalize("\n".join(s or "" for s in lines))))
    return docs


def src_moby(xdir):
    d = rdata.load_lazy(os.path.join(
        xdir, "r-cran-tokenizers/usr/lib/R/site-library/tokenizers/data/Rdata"))
    text = rdata.unvec(d["mobydick"])[0]
    return [unwrap(strip_gutenberg(normalize(text)))]


def src_tidytext(xdir):
    d = rdata.load_rda(os.path.join(
        xdir, "r-cran-tidytext/usr/lib/R/site-library/tidytext/extdata/books.rda"))
    cols = rdata.unvec(d["books"])
    text, title = rdata.unvec(cols[1]), rdata.unvec(cols[2])
    books = {}
    for t, line in zip(title, text):
        books.setdefault(t, []).append(line or "")
    docs = []
    for t in ("Great Expectations", "Twenty Thousand Leagues under the Sea",
              "The War of the Worlds"):  # Pride and Prejudice is already in janeaustenr
        docs.append(unwrap(normalize("\n".join(books[t]))))
    return docs


def src_jargon(xdir):
    raw = gzip.decompress(open(os.path.join(
        xdir, "jargon-text/usr/share/doc/jargon-text/jargon.txt.gz"), "rb").read()).decode("utf-8")
    raw = normalize(raw)
    lines = [ln for ln in raw.split("\n") if not re.search(r"[\u2500-\u257f]", ln)]
    paras = unwrap("\n".join(lines)).split("\n\n")
    # drop the table of contents (short lines) and keep real paragraphs
    paras = [p for p in paras if len(p) >= 60]
    return ["\n\n".join(paras)]


def src_fortunes(xdir):
    base = os.path.join(xdir, "fortunes/usr/share/games/fortunes")
    docs = []
    for name in FORTUNE_FILES:
        raw = open(os.path.join(base, name), "rb").read().decode("utf-8", errors="replace")
        raw = normalize(raw)
        for f in raw.split("\n%\n"):
            f = f.strip("\n%")
            if len(f.strip()) >= 20:
                docs.append(f.rstrip())
    return docs


SOURCES = [
    ("web_bible", "sword-text-web", src_web),
    ("austen", "r-cran-janeaustenr", src_austen),
    ("moby_dick", "r-cran-tokenizers", src_moby),
    ("tidytext_books", "r-cran-tidytext", src_tidytext),
    ("jargon", "jargon-text", src_jargon),
    ("fortunes", "fortunes", src_fortunes),
]


def split_heldout(docs):
    total = sum(len(d) for d in docs)
    need = int(total * HELDOUT_FRACTION)
    train, held = list(docs), []
    while need > 0 and train:
        d = train.pop()
        if len(d) <= need:
            held.insert(0, d)
            need -= len(d)
        else:
            cut = d.rfind("\n\n", 0, len(d) - need)
            if cut <= 0:
                cut = len(d) - need
            train.append(d[:cut].rstrip())
            held.insert(0, d[cut:].lstrip())
            need = 0
    return train, held


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default=os.environ.get("HEADSCOPE_TRAIN_WORK", "/tmp/headscope-train"))
    args = ap.parse_args()
    xdir, versions = fetch(args.work)
    outdir = os.path.join(args.work, "corpus")
    os.makedirs(outdir, exist_ok=True)
    train_all, held_all, info = [], [], []
    for name, pkg, fn in SOURCES:
        docs = fn(xdir)
        tr, he = split_heldout(docs)
        train_all += tr
        held_all += he
        info.append({"source": name, "package": pkg, "version": versions[pkg],
                     "description": PACKAGES[pkg], "documents": len(docs),
                     "train_chars": sum(map(len, tr)), "heldout_chars": sum(map(len, he))})
        print("%-15s %-20s docs=%5d train=%9d heldout=%7d" % (
            name, pkg, len(docs), info[-1]["train_chars"], info[-1]["heldout_chars"]))
    sep = "\n" + EOT + "\n"
    with open(os.path.join(outdir, "train.txt"), "w", encoding="utf-8") as f:
        f.write(sep.join(train_all))
    with open(os.path.join(outdir, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write(sep.join(held_all))
    with open(os.path.join(outdir, "sources.json"), "w") as f:
        json.dump(info, f, indent=1)
    print("train chars %d, heldout chars %d" % (sum(i["train_chars"] for i in info),
                                                sum(i["heldout_chars"] for i in info)))


if __name__ == "__main__":
    main()
