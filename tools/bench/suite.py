#!/usr/bin/python3
"""HeadScope against PyTorch, row by row, in one run; writes docs/benchmarks.md.

    /usr/bin/python3 tools/bench/suite.py --build-dir build-bench --model build-bench/gpt2-small [--quick]

Normally started by tools/bench/run.sh, which installs, builds and writes the model first.

Every row (forward pass with the full cache or logits only; 20, 128, 1024 tokens; 1 and 2
threads) runs HeadScope (build/tools/bench/hs_bench_row) and PyTorch (tools/bench/torch_bench.py)
in separate processes, alternating HeadScope, PyTorch, HeadScope, PyTorch... for several rounds;
each process warms up, then times several passes. A side's time is the median of all its timed
passes in the row, its memory the largest peak RSS of its processes. Both sides get the same
token ids. PyTorch runs with OPENBLAS_CORETYPE unset (for that command alone) and its threads set
explicitly; both sides get OMP_NUM_THREADS.

Then: the activation-patching sweep (issue 12) on the same model at 16 tokens: HeadScope's
batched `hs::patching_sweep` (hs_bench_row --mode patch) against TransformerLens's conventions in
PyTorch, one full forward pass per patched cell (torch_bench.py --mode patch, i.e.
tools/reference/hsref.py's patching_sweep in float32), both timed from the two prompts. Then: issue 23's
gradients (sections grad and atp): the gradient of a logit difference at every hook from text
(hs_bench_row --mode grad: gradient and forward pass in alternating pairs) against PyTorch
autograd keeping every hook's gradient (torch_bench.py --mode grad), and attribution patching of
four sites against their four exact sweeps (hs_bench_row --mode atp). Then: issue 24's shapes
(sections gemma2 and qwen3: tools/bench/make_gemma_shapes.py's Gemma-2-2B and Qwen3-0.6B): the
first open with the page cache evicted, 20 tokens with the full cache on 2 threads against
torch_bench.py's Qwen3 / Gemma 2 module, and Gemma's 256 tokens with every view's data (peak RSS);
a folder HeadScope cannot open gets the loader's message on its side, PyTorch still runs. Then: the
time to open the model (hs::Model::load, memory-mapped; warm and cold page cache), the
GUI's keystroke latency and longest stall on the built-in model (hs_bench_keys, headless), and,
when `perf` works, where the forward pass spends its time. The markdown page keeps the text
between the `notes:begin` / `notes:end` markers of the previous page, so hand-written analysis
survives a re-run.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"
sys.path.insert(0, HERE)
from openblas_env import best_coretype, best_env  # noqa: E402

TOKENS = (20, 128, 1024)
THREADS = (1, 2)
MODES = ("cache", "logits")
NOTES_BEGIN, NOTES_END = "<!-- notes:begin -->", "<!-- notes:end -->"
PATCH_TOKENS = 16
PATCH_WHAT = ("resid_pre", "z")  # 192 and 144 patched runs on GPT-2 small at 16 tokens
SECTIONS = ("rows", "patch", "grad", "atp", "families", "gemma2", "qwen3", "units", "open", "gui", "profile")
# Issue 23's gradient benchmarks. grad: the gradient of logit(answer) - logit(wrong) at every hook
# from this text (BOS + 19 tokens with GPT-2's tokenizer), the answer " Mary" against " John"
# (GPT-2's ids). atp: AtP of these four sites at PATCH_TOKENS tokens against their exact sweeps.
GRAD_TEXT = "After the party ended, when Mary and John went to the store, John gave a drink to"
GRAD_TOKENS = 20
GRAD_ANSWER, GRAD_WRONG = 5335, 1757
GRAD_STYLES = ("frozen", "params")  # torch_bench.py --grad-style: the PyTorch references
ATP_WHAT = ("resid_pre", "attn_out", "mlp_out", "z")
# These sections have a block of their own on the page: run alone (--sections grad,atp), they
# replace only that block of the existing page and keep the rest of a whole run's numbers.
GRAD_BEGIN, GRAD_END = "<!-- gradients:begin -->", "<!-- gradients:end -->"
GRAD_SECTIONS = {"grad", "atp"}
# Llama-family models of real shapes (tools/bench/make_llama_shapes.py; run.sh writes them):
# (folder name, the page's name, the rows run on it)
FAMILY_MODELS = (("smollm-135m", "SmolLM-135M shape (Llama, BF16)", (("cache", 20, 1), ("cache", 20, 2))),
                 ("qwen2.5-0.5b", "Qwen2.5-0.5B shape (Qwen2, BF16)", (("cache", 20, 2),)))
FAMILY_LONG = ("qwen2.5-0.5b", 1024)  # the long prompt with every view: time and peak memory
# Issue 24's shapes (tools/bench/make_gemma_shapes.py; run.sh writes them), one section each with a
# block of its own on the page (run alone, --sections gemma2,qwen3 replaces only that block):
# section -> (folder, the page's name, (rounds, warm-up, timed) of the 20-token row)
ISSUE24_MODELS = {
    "qwen3": ("qwen3-0.6b", "Qwen3-0.6B shape (Qwen3, BF16)", (3, 3, 10)),
    "gemma2": ("gemma-2-2b", "Gemma-2-2B shape (Gemma 2, BF16, 3 shards)", (2, 2, 6)),
}
ISSUE24_SECTIONS = set(ISSUE24_MODELS)
ISSUE24_BEGIN, ISSUE24_END = "<!-- issue24:begin -->", "<!-- issue24:end -->"
ISSUE24_TOKENS, ISSUE24_THREADS = 20, 2
ISSUE24_LONG = ("gemma2", 256)  # every view's data (full cache, stored scores and results): peak RSS
ISSUE24_SPEEDUP = {"qwen3": 2.5, "gemma2": 2.0}  # issue 24's targets against PyTorch, 20 tokens, 2 threads
ISSUE24_OPEN_S, ISSUE24_LONG_MIB = 10.0, 12 * 1024
# Issue 25's speed targets (section units, a block of its own on the page): on the GPT-2-small
# shape with a 16,384-latent TopK SAE at blocks.6.hook_resid_pre (tools/bench/make_bench_sae.py;
# run.sh writes it beside the model as sae16k), the keystroke with the Features view on screen
# against the same with the Attention view (hs_bench_keys --long: keys at the end of a 127-token
# document, then in its middle), and `headscope-cli scan --units sae:...` against the same scan
# without units, on the built-in model's held-out passages (the first 64, cut at 128 tokens).
UNITS_SECTIONS = {"units"}
ISSUE25_BEGIN, ISSUE25_END = "<!-- issue25:begin -->", "<!-- issue25:end -->"
UNITS_KEYS_ARGS = ("--long", "128", "--long-keys", "24", "--middle-keys", "6")
UNITS_SCAN_PROMPTS, UNITS_SCAN_TOKENS = 64, 128
UNITS_KEYSTROKE_GOAL, UNITS_SCAN_GOAL = 2.0, 1.5
BLOCK_SECTIONS = GRAD_SECTIONS | ISSUE24_SECTIONS | UNITS_SECTIONS  # run alone: only their blocks are rewritten


def plan(tokens: int, quick: bool):
    """(rounds, warmup, runs) per process for a row of this length."""
    if quick:
        return (1, 1, 3) if tokens <= 128 else (1, 0, 1)
    if tokens <= 20:
        return 3, 3, 10
    if tokens <= 128:
        return 3, 2, 5
    return 2, 1, 2  # a 1024-token pass takes seconds: fewer runs keep the suite near 15 minutes


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sh(cmd, **kw) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, **kw).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def run_json(cmd, env, timeout=1800):
    """Runs one benchmark process; returns its JSON line or raises with its stderr."""
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}... exited {p.returncode}:\n{p.stderr.strip()[-2000:]}")
    for line in reversed(p.stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"{' '.join(cmd[:4])}... printed no JSON:\n{p.stdout[-1000:]}\n{p.stderr[-1000:]}")


def bench_tokens(n: int, d_vocab: int):
    # The same ids torch_bench.py makes for --tokens N.
    return np.random.default_rng(12345).integers(0, d_vocab, n).tolist()


def cpu_seconds():
    """(CPU seconds used by the whole machine, CPU seconds used by this suite and its children)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal ...: busy = all but idle and iowait
    busy = sum(fields[:8]) - fields[3] - fields[4]
    t = os.times()
    return busy / os.sysconf("SC_CLK_TCK"), t.user + t.system + t.children_user + t.children_system


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except OSError:
        return [0.0, 0.0, 0.0]


# ----------------------------------------------------------------------------------------------
# The machine


def machine(build_dir: str, hs_row: str) -> dict:
    m = {}
    lscpu = sh(["lscpu"])
    get = lambda key: next((l.split(":", 1)[1].strip() for l in lscpu.splitlines() if l.startswith(key + ":")), "?")  # noqa: E731
    m["cpu"] = get("Model name")
    m["cores"] = os.cpu_count()
    m["threads_per_core"] = get("Thread(s) per core")
    m["hypervisor"] = get("Hypervisor vendor")
    flags = get("Flags").split()
    m["simd"] = " ".join(f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni") if f in flags)
    m["l2"] = get("L2 cache")
    m["l3"] = get("L3 cache")
    try:
        with open("/proc/meminfo") as f:
            kb = int(next(l for l in f if l.startswith("MemTotal")).split()[1])
        m["ram_gb"] = round(kb / 1024 / 1024, 1)
    except (OSError, StopIteration, ValueError):
        m["ram_gb"] = None
    m["kernel"] = platform.release()
    m["os"] = sh(["sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"])
    cxx = "c++"
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
            cache = f.read()
        mm = re.search(r"^CMAKE_CXX_COMPILER:\w+=(.*)$", cache, re.M)
        if mm:
            cxx = mm.group(1)
        m["cmake_flags"] = " ".join(
            f"{k}={v}" for k, v in re.findall(r"^(HEADSCOPE_\w+|CMAKE_BUILD_TYPE):\w+=(.*)$", cache, re.M))
    except OSError:
        m["cmake_flags"] = "?"
    m["compiler"] = sh([cxx, "--version"]).splitlines()[0] if sh([cxx, "--version"]) else cxx
    m["cmake"] = (sh(["cmake", "--version"]).splitlines() or ["?"])[0]
    macros = "/usr/include/eigen3/Eigen/src/Core/util/Macros.h"
    try:
        with open(macros) as f:
            t = f.read()
        v = [re.search(rf"#define EIGEN_{k}_VERSION (\d+)", t).group(1) for k in ("WORLD", "MAJOR", "MINOR")]
        m["eigen"] = ".".join(v)
    except (OSError, AttributeError):
        m["eigen"] = "?"
    # HeadScope's BLAS: what the binary links, and whether Eigen hands products to it.
    libs = sh(["ldd", hs_row])
    blas = [l.split()[0] for l in libs.splitlines() if re.search(r"blas|lapack|mkl", l)]
    uses = sh(["grep", "-rl", "EIGEN_USE_BLAS", os.path.join(REPO, "CMakeLists.txt"), os.path.join(REPO, "core")])
    m["hs_blas"] = (", ".join(blas) + (" (EIGEN_USE_BLAS)" if uses else "")) if blas else "none (Eigen's own kernels)"
    gomp = [l.split()[0] for l in libs.splitlines() if "gomp" in l or "libomp" in l]
    m["hs_openmp"] = ", ".join(gomp) or "?"
    probe = (
        "import os, torch, numpy\n"
        "print(torch.__version__); print(numpy.__version__)\n"
        "maps = open('/proc/self/maps').read()\n"
        "import re\n"
        "print(sorted(set(re.findall(r'(/\\S*(?:blas|lapack)\\S*)', maps))))\n"
        "print(torch.get_num_threads())\n"
    )
    out = sh([PYTHON, "-c", probe], env=best_env()).splitlines()
    m["torch"] = out[0] if out else "not found"
    m["numpy"] = out[1] if len(out) > 1 else "?"
    blas_libs = [os.path.realpath(p) for p in eval(out[2])] if len(out) > 2 else []  # noqa: S307 (our own output)
    m["torch_blas"] = ", ".join(sorted(set(blas_libs))) or "?"
    m["openblas_coretype_in_env"] = os.environ.get("OPENBLAS_CORETYPE")
    m["python"] = sh([PYTHON, "--version"])
    head = sh(["git", "-C", REPO, "rev-parse", "--short", "HEAD"])
    dirty = sh(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no", "--", "core", "CMakeLists.txt"])
    m["commit"] = head + (" (with uncommitted changes in core/)" if dirty else "")
    return m


# ----------------------------------------------------------------------------------------------
# Rows


def hs_env(threads: int, pack_cache: str = "off") -> dict:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    # The packed-matrix cache on disk (core/model/pack_cache.h) is off unless a measurement of
    # reopening asks for it: a first open writes its entry in the background, which would run
    # beside the timed passes.
    env["HEADSCOPE_PACK_CACHE"] = pack_cache
    return env


def reopen(hs_row: str, model: str, runs: int) -> dict:
    """Opening a model the second time and after: its packed matrices mapped from the cache on
    disk (the warm-up open writes the entry; hs_bench_row waits for it)."""
    with tempfile.TemporaryDirectory(prefix="hs-pack-cache-") as d:
        return run_json([hs_row, "--model", model, "--mode", "open", "--warmup", "1", "--runs", str(runs)],
                        hs_env(2, d))


def torch_env(threads: int) -> dict:
    # OpenBLAS's best kernel for this CPU (openblas_env.py; torch_bench.py sets it again itself).
    env = best_env()
    env["OMP_NUM_THREADS"] = str(threads)
    return env


def run_side(args, cmd, env):
    """One process of a row: its JSON, or {"stopped": seconds} when it overran the hard limit."""
    limit = args.max_process_seconds * 2 + 120 if args.max_process_seconds else None
    if args.max_process_seconds:
        cmd = cmd + ["--max-seconds", str(int(args.max_process_seconds))]
    t0 = time.time()
    try:
        return run_json(cmd, env, timeout=limit)
    except subprocess.TimeoutExpired:
        log(f"suite:        stopped after {time.time() - t0:.0f} s without finishing one timed pass")
        return {"stopped": round(time.time() - t0)}


def new_side():
    """What a row collects of one side over its processes."""
    return {"runs": [], "cpu": [], "rss": [], "run_rss": [], "stopped": None, "layouts": []}


def take(g, j) -> bool:
    """Adds one process's JSON to its side; False when the process was stopped (no passes)."""
    if "stopped" in j:
        g["stopped"] = j["stopped"]
        return False
    g["runs"] += j["runs"]
    g["cpu"] += j.get("cpu_runs", [])
    g["rss"].append(j["peak_rss_mb"])
    if j.get("run_peak_rss_mb") is not None:
        g["run_rss"].append(j["run_peak_rss_mb"])
    if j.get("layout"):  # torch_bench.py's Llama family: the weight layout it timed as faster
        g["layouts"].append(j["layout"])
    return True


def summarize(row, k, g):
    """A side's fields of a row: median and fastest pass, CPU, peak memory, whether it was stopped."""
    row[f"{k}_ms"] = statistics.median(g["runs"]) if g["runs"] else None
    row[f"{k}_min_ms"] = min(g["runs"]) if g["runs"] else None
    row[f"{k}_runs"] = g["runs"]
    row[f"{k}_cpu_ms"] = statistics.median(g["cpu"]) if g["cpu"] else None
    row[f"{k}_rss_mb"] = max(g["rss"]) if g["rss"] else None
    row[f"{k}_run_rss_mb"] = max(g["run_rss"]) if g["run_rss"] else None
    row[f"{k}_stopped_s"] = g["stopped"]
    row[f"{k}_early"] = g.get("early", False)
    row[f"{k}_layouts"] = sorted(set(g.get("layouts", [])))


def run_row(args, hs_row, mode, tokens, threads, ids_arg, plan_=None, sides_run=("hs", "pt")):
    """One row, both sides alternating; `plan_` (rounds, warm-up, timed) instead of plan()'s, and
    `sides_run` to run one side alone (a model HeadScope cannot open still gets PyTorch's time)."""
    rounds, warmup, runs = plan_ or plan(tokens, args.quick)
    common = ["--model", args.model, "--token-ids", ids_arg, "--threads", str(threads), "--mode", mode,
              "--warmup", str(warmup), "--runs", str(runs)]
    sides = {"hs": [hs_row], "pt": [PYTHON, os.path.join(HERE, "torch_bench.py")]}
    envs = {"hs": hs_env(threads), "pt": torch_env(threads)}
    got = {k: {**new_side(), "cache_mb": None, "load": [], "early": False} for k in sides}
    t0 = time.time()
    done = 0
    for r in range(rounds):
        # On a loaded machine a 1024-token row can take minutes per round: stop adding rounds once
        # the row has used its budget (the table shows the rounds that ran).
        if r > 0 and args.max_row_seconds and time.time() - t0 > args.max_row_seconds:
            log(f"suite:        row budget of {args.max_row_seconds:.0f} s used after {r} round(s); not adding more")
            break
        done += 1
        for k in sides_run:  # alternating: HeadScope, PyTorch, HeadScope, PyTorch, ...
            if got[k]["stopped"]:
                continue
            j = run_side(args, sides[k] + common, envs[k])
            g = got[k]
            if not take(g, j):
                continue
            if k == "pt":
                g["blas"], g["malloc"] = j.get("blas"), j.get("malloc")
            g["cache_mb"] = j.get("cache_mb", g["cache_mb"])
            if j.get("load_ms") is not None:
                g["load"].append(j["load_ms"])
            g["early"] |= bool(j.get("stopped_early"))
    row = {"mode": mode, "tokens": tokens, "threads": threads, "rounds": done, "warmup": warmup, "runs": runs}
    for k, g in got.items():
        summarize(row, k, g)
    row["hs_cache_mb"] = got["hs"]["cache_mb"]
    # Which BLAS kernel and malloc setting PyTorch ran with, as torch_bench.py reported them.
    row["pt_blas"], row["pt_malloc"] = got["pt"].get("blas"), got["pt"].get("malloc")
    row["pt_load_ms"] = got["pt"]["load"]
    ok = row["hs_ms"] and row["pt_ms"]
    row["ratio"] = row["hs_ms"] / row["pt_ms"] if ok else None
    row["speedup"] = row["pt_ms"] / row["hs_ms"] if ok else None
    return row


def run_patch_row(args, hs_row, what, threads, ids_arg):
    """One patching row: HeadScope and PyTorch alternating, each timing whole sweeps from prompts."""
    rounds = 1 if args.quick else 2
    hs_plan = ("0", "2") if args.quick else ("1", "5")   # (warm-up, timed) sweeps per process
    pt_plan = ("0", "1")                                  # a PyTorch sweep takes seconds: one per process
    common = ["--model", args.model, "--token-ids", ids_arg, "--threads", str(threads), "--mode", "patch",
              "--what", what, "--answer", "11", "--wrong", "13"]
    got = {k: {**new_side(), "sweep": [], "cells": None} for k in ("hs", "pt")}
    for _ in range(rounds):
        for k, cmd, env, (warmup, runs) in (
                ("hs", [hs_row], hs_env(threads), hs_plan),
                ("pt", [PYTHON, os.path.join(HERE, "torch_bench.py")], torch_env(threads), pt_plan)):
            g = got[k]
            if g["stopped"]:
                continue
            j = run_side(args, cmd + common + ["--warmup", warmup, "--runs", runs], env)
            if not take(g, j):
                continue
            g["sweep"] += j.get("sweep_runs", [])
            g["cells"] = j.get("patched_runs")
    row = {"what": what, "tokens": PATCH_TOKENS, "threads": threads, "rounds": rounds,
           "hs_plan": hs_plan, "pt_plan": pt_plan, "cells": got["hs"]["cells"] or got["pt"]["cells"]}
    for k, g in got.items():
        summarize(row, k, g)
    row["hs_sweep_ms"] = statistics.median(got["hs"]["sweep"]) if got["hs"]["sweep"] else None
    ok = row["hs_ms"] and row["pt_ms"]
    row["speedup"] = row["pt_ms"] / row["hs_ms"] if ok else None
    return row


def patch_targets(patch_rows):
    """[(target, measured, met or None, note)] of issue 12's patching sweep."""
    r = next((r for r in patch_rows if r["what"] == "resid_pre" and r["threads"] == 2), None)
    if not r:
        return [("Patching sweep (resid_pre, 192 runs, 16 tokens, 2 threads): at most 2 s", "not measured", None, "")]
    note = f"the sweep alone {fmt_ms(r['hs_sweep_ms'])} ms, after the two runs of the prompts" if r["hs_sweep_ms"] else ""
    return [
        (f"Patching sweep on GPT-2 small, {r['tokens']} tokens, resid_pre ({r['cells']} patched runs), 2 threads: "
         f"at most 2 s", f"{side_ms(r, 'hs')} ms", r["hs_ms"] is not None and r["hs_ms"] <= 2000, note),
        ("The same sweep: at least 5x faster than TransformerLens's conventions in PyTorch",
         f"{fx(r['speedup'], '.1f', 'x')} ({side_ms(r, 'pt')} ms vs {side_ms(r, 'hs')} ms)",
         r["speedup"] is not None and r["speedup"] >= 5.0, ""),
    ]


def run_grad_row(args, hs_row, threads):
    """One gradient row: HeadScope (gradient and forward pass, pairs in one process) and each
    PyTorch style, alternating for several rounds; PyTorch gets the ids HeadScope tokenized."""
    rounds, warmup, runs = (1, 1, 3) if args.quick else (3, 3, 10)
    hs_cmd = [hs_row, "--model", args.model, "--mode", "grad", "--text", GRAD_TEXT, "--threads", str(threads),
              "--answer", str(GRAD_ANSWER), "--wrong", str(GRAD_WRONG), "--warmup", str(warmup), "--runs", str(runs)]
    got = {k: new_side() for k in ("hs",) + GRAD_STYLES}
    fwd, fwd_cpu, ratios, bwd = [], [], [], []
    info = {}
    for _ in range(rounds):
        j = run_side(args, hs_cmd, hs_env(threads)) if not got["hs"]["stopped"] else {"stopped": got["hs"]["stopped"]}
        if take(got["hs"], j):
            fwd += j["forward_runs"]
            ratios += j["ratio_runs"]
            bwd += j["backward_runs"]
            fwd_cpu.append(j["forward_cpu_median_ms"])
            info = {k: j[k] for k in ("token_ids", "tokens", "grad_keys", "grad_floats", "metric")}
        if not info:
            break  # PyTorch needs HeadScope's ids
        for style in GRAD_STYLES:
            g = got[style]
            if g["stopped"]:
                continue
            j = run_side(args, [PYTHON, os.path.join(HERE, "torch_bench.py"), "--model", args.model, "--mode", "grad",
                                "--grad-style", style, "--token-ids", info["token_ids"], "--threads", str(threads),
                                "--answer", str(GRAD_ANSWER), "--wrong", str(GRAD_WRONG), "--warmup", str(warmup),
                                "--runs", str(runs)], torch_env(threads))
            if not take(g, j):
                continue
            info[f"{style}_keys"], info[f"{style}_floats"] = j["grad_keys"], j["grad_floats"]
            info[f"{style}_metric"] = j["metric"]
    row = {"threads": threads, "rounds": rounds, "warmup": warmup, "runs": runs, **info}
    for k, g in got.items():
        summarize(row, k, g)
    row["fwd_ms"] = statistics.median(fwd) if fwd else None
    row["fwd_cpu_ms"] = statistics.median(fwd_cpu) if fwd_cpu else None
    row["bwd_ms"] = statistics.median(bwd) if bwd else None
    row["ratio"] = statistics.median(ratios) if ratios else None  # the median of the pairs' ratios
    pts = [(row[f"{s}_ms"], s) for s in GRAD_STYLES if row[f"{s}_ms"]]
    row["pt_ms"], row["pt_style"] = min(pts) if pts else (None, None)  # the strongest PyTorch reference
    row["speedup"] = row["pt_ms"] / row["hs_ms"] if row["pt_ms"] and row["hs_ms"] else None
    return row


def run_atp_row(args, hs_row, threads, ids_arg):
    """AtP of the four sites against their four exact sweeps, both in one HeadScope process a round
    (hs_bench_row --mode atp), both timed from the two prompts."""
    rounds = 1 if args.quick else 2
    plan_ = ("1", "3", "0", "1") if args.quick else ("2", "10", "1", "3")  # AtP warm-up, timed; exact warm-up, timed
    cmd = [hs_row, "--model", args.model, "--mode", "atp", "--token-ids", ids_arg, "--threads", str(threads),
           "--what", ",".join(ATP_WHAT), "--answer", "11", "--wrong", "13", "--warmup", plan_[0], "--runs", plan_[1],
           "--exact-warmup", plan_[2], "--exact-runs", plan_[3]]
    atp, exact, cpu_a, cpu_e, bwd, est, rss = [], [], [], [], [], [], []
    info, stopped = {}, None
    for _ in range(rounds):
        j = run_side(args, cmd, hs_env(threads))
        if "stopped" in j:
            stopped = j["stopped"]
            break
        atp += j["runs"]
        exact += j["exact_runs"]
        cpu_a += j["cpu_runs"]
        cpu_e += j["exact_cpu_runs"]
        bwd += j["backward_runs"]
        est += j["estimates_runs"]
        rss.append(j["peak_rss_mb"])
        info = {k: j[k] for k in ("nodes", "exact_cells", "exact_patched_runs", "max_abs_diff", "max_abs_exact",
                                  "worst_site")}
    med = lambda v: statistics.median(v) if v else None  # noqa: E731
    row = {"threads": threads, "tokens": PATCH_TOKENS, "rounds": rounds, "plan": plan_, "stopped_s": stopped,
           "atp_ms": med(atp), "atp_min_ms": min(atp) if atp else None, "exact_ms": med(exact),
           "atp_cpu_ms": med(cpu_a), "exact_cpu_ms": med(cpu_e), "bwd_ms": med(bwd), "estimates_ms": med(est),
           "rss_mb": max(rss) if rss else None, **info}
    row["speedup"] = row["exact_ms"] / row["atp_ms"] if row["atp_ms"] and row["exact_ms"] else None
    return row


def grad_targets(grad_rows, atp_rows):
    """[(target, measured, met or None, note)] of issue 23's speed targets."""
    out = []
    for r in grad_rows:
        t = r["threads"]
        fwd_note = (f"the forward pass {fmt_ms(r['fwd_ms'])} ms, the gradient {fmt_ms(r['hs_ms'])} ms "
                    f"(backward alone {fmt_ms(r['bwd_ms'])} ms); median of {r['rounds'] * r['runs']} pairs' ratios")
        out.append((f"Gradient at every hook, GPT-2 small, {r.get('tokens', GRAD_TOKENS)} tokens from text, {t} thread"
                    f"{'s' if t > 1 else ''}: at most 2.5x one forward pass with the cache",
                    f"{fx(r['ratio'], '.2f', 'x')} the forward pass" if r["ratio"] else "not measured",
                    None if r["ratio"] is None else r["ratio"] <= 2.5, fwd_note if r["ratio"] else ""))
        out.append((f"The same gradient, {t} thread{'s' if t > 1 else ''}: at least 2x faster than PyTorch autograd "
                    f"keeping every hook's gradient",
                    f"{fx(r['speedup'], '.2f', 'x')} ({side_ms(r, 'pt')} ms, {r['pt_style']}, vs {side_ms(r, 'hs')} ms)"
                    if r["speedup"] else "not measured",
                    None if r["speedup"] is None else r["speedup"] >= 2.0, ""))
    for r in atp_rows:
        t = r["threads"]
        out.append((f"AtP of {', '.join(ATP_WHAT)} at {r['tokens']} tokens, {t} thread{'s' if t > 1 else ''}: at least "
                    f"20x faster than the four exact sweeps",
                    f"{fx(r['speedup'], '.1f', 'x')} ({fmt_ms(r['exact_ms'])} ms vs {fmt_ms(r['atp_ms'])} ms)"
                    if r["speedup"] else "not measured",
                    None if r["speedup"] is None else r["speedup"] >= 20.0, ""))
    return out


def grad_markdown(grad_rows, atp_rows, partial_note=""):
    L = [GRAD_BEGIN, "## Gradients and attribution patching (issue 23)", ""]
    if partial_note:
        L += [partial_note, ""]
    if not grad_rows and not atp_rows:
        return L + ["Not measured.", GRAD_END]
    L.append("| target | measured | |")
    L.append("| --- | --- | --- |")
    for t, measured, ok, note in grad_targets(grad_rows, atp_rows):
        L.append(f"| {t} | {measured}{' — ' + note if note else ''} | {'not measured' if ok is None else verdict(ok)} |")
    L.append("")
    if grad_rows:
        r0 = grad_rows[0]
        L.append(f"**The gradient at every hook.** The GPT-2-small-shaped model above, the text \"{GRAD_TEXT}\" "
                 f"({r0.get('tokens', '?')} tokens with BOS), the metric logit({GRAD_ANSWER}) - logit({GRAD_WRONG}) "
                 "(\" Mary\" and \" John\" in GPT-2's vocabulary) at the last position. *HeadScope*: `hs::run_text` "
                 "(tokenize, the full cache, mlp.hook_pre kept for the backward pass: `RunOptions::store_mlp_pre`) "
                 "then `hs::backward` keeping every key (hs_bench_row --mode grad), "
                 f"{r0.get('grad_keys', '?')} keys, {r0.get('grad_floats', 0) / 1e6:.2f} M floats; each timed step is "
                 "a pair in alternating order, one forward pass from the same text with the full cache (the yardstick) "
                 "and one gradient, and *ratio* is the median of the pairs' ratios. *PyTorch* (torch_bench.py --mode grad, "
                 "the same ids): the cache-mode forward pass with autograd on, `retain_grad()` on every key's tensor, "
                 "the metric, `backward()`, the gradients gathered in TransformerLens's layouts; *frozen*: the weights "
                 "need no gradient, so autograd computes only the activations' (the strongest way); *params*: the "
                 "weights require gradients as a HookedTransformer's parameters do by default. The speedup is "
                 "against the faster of the two. Medians in milliseconds.")
        L.append("")
        L.append("| threads | HeadScope gradient | of which backward | HeadScope forward | ratio | PyTorch frozen | "
                 "PyTorch params | speedup | keys HS / PT | CPU ms HS / PT frozen | RSS MiB HS / PT frozen | runs per side |")
        L.append("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- |")
        for r in grad_rows:
            L.append(f"| {r['threads']} | {side_ms(r, 'hs')} | {fmt_ms(r['bwd_ms'])} | {fmt_ms(r['fwd_ms'])} | "
                     f"{fx(r['ratio'], '.2f', 'x')} | {side_ms(r, 'frozen')} | {side_ms(r, 'params')} | "
                     f"{fx(r['speedup'], '.2f', 'x')} | {r.get('grad_keys', '—')} / {r.get('frozen_keys', '—')} | "
                     f"{fmt_ms(r['hs_cpu_ms'])} / {fmt_ms(r['frozen_cpu_ms'])} | {fx(r['hs_rss_mb'], '.0f')} / "
                     f"{fx(r['frozen_rss_mb'], '.0f')} | {r['rounds']} x ({r['warmup']} warm-up + {r['runs']}) |")
        L.append("")
        ms = [f"{r['threads']} thread(s): HeadScope {r.get('metric', float('nan')):.6g}, PyTorch "
              f"{r.get('frozen_metric', float('nan')):.6g}" for r in grad_rows if r.get("frozen_metric") is not None]
        if ms:
            L.append("The metric on both sides (float32; a check that they differentiate the same thing): "
                     + "; ".join(ms) + ".")
            L.append("")
    if atp_rows:
        r0 = atp_rows[0]
        L.append(f"**Attribution patching.** The patching sweep's model, prompts and metric (above): {PATCH_TOKENS} "
                 "tokens, the corrupted prompt with position 1 changed, logit(11) - logit(13) at the last position. "
                 "hs_bench_row --mode atp times, in one process, *AtP*: the clean and the corrupted run, one backward "
                 "pass on the corrupted run keeping the four sites' hooks (`hs::atp_gradients`), then the four "
                 f"estimates (`hs::attribution_patching`; {r0.get('nodes', '?')} nodes); and *exact*: the same two runs, "
                 "then `hs::patching_sweep` of each site as `headscope-cli patch` runs it (cells whose patched value "
                 f"equals the corrupted run's are not recomputed; {r0.get('exact_patched_runs', '?')} patched runs of "
                 f"{r0.get('exact_cells', '?')} cells). The largest difference between the estimate and the exact "
                 f"sweep is printed as a check of what was timed (AtP is an estimate: "
                 f"{fx(r0.get('max_abs_diff'), '.3g')} at most, against exact values up to "
                 f"{fx(r0.get('max_abs_exact'), '.3g')}, worst on {r0.get('worst_site', '?')}).")
        L.append("")
        L.append("| threads | AtP ms | of which backward | four estimates | four exact sweeps ms | speedup | CPU ms AtP / exact "
                 "| RSS MiB | runs (AtP warm-up + timed, exact warm-up + timed) |")
        L.append("| ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |")
        for r in atp_rows:
            p = r["plan"]
            L.append(f"| {r['threads']} | {fmt_ms(r['atp_ms'])} | {fmt_ms(r['bwd_ms'])} | {fx(r['estimates_ms'], '.2f')} | "
                     f"{fmt_ms(r['exact_ms'])} | {fx(r['speedup'], '.1f', 'x')} | {fmt_ms(r['atp_cpu_ms'])} / "
                     f"{fmt_ms(r['exact_cpu_ms'])} | {fx(r['rss_mb'], '.0f')} | {r['rounds']} x ({p[0]} + {p[1]}, "
                     f"{p[2]} + {p[3]}) |")
        L.append("")
    L.append("Reproduce these alone (about 5 minutes; the rest of this page is kept): "
             "`tools/bench/run.sh --sections grad,atp`.")
    L.append(GRAD_END)
    return L


def replace_grad_block(page: str, block: str, begin: str = GRAD_BEGIN, end: str = GRAD_END) -> str:
    """The page with its gradients block (or another block between `begin` and `end`) replaced,
    or put before the notes when it has none."""
    if begin in page and end in page:
        head, rest = page.split(begin, 1)
        return head + block + rest.split(end, 1)[1]
    if "## Notes" in page:
        head, rest = page.split("## Notes", 1)
        return head + block + "\n\n## Notes" + rest
    return page.rstrip("\n") + "\n\n" + block + "\n"


def run_family_rows(args, hs_row):
    """The Llama-family shapes: short passes against PyTorch, opening, and one long prompt with every view."""
    out = []
    saved = args.model
    try:
        for folder, title, row_specs in FAMILY_MODELS:
            path = os.path.join(args.family_dir, folder)
            if not os.path.isfile(os.path.join(path, "config.json")):
                log(f"suite: {path} is missing (tools/bench/make_llama_shapes.py writes it); skipping {title}")
                continue
            args.model = path
            with open(os.path.join(path, "config.json")) as f:
                d_vocab = json.load(f)["vocab_size"]
            entry = {"folder": folder, "title": title, "rows": [], "open": None, "long": None}
            for mode, n, t in row_specs:
                ids_arg = ",".join(str(i) for i in bench_tokens(n, d_vocab))
                log(f"suite: {title}: {mode} {n} tokens, {t} thread(s) ...")
                r = run_row(args, hs_row, mode, n, t, ids_arg)
                entry["rows"].append(r)
                log(f"suite:        HeadScope {side_ms(r, 'hs')} ms, PyTorch {side_ms(r, 'pt')} ms "
                    f"({fx(r['speedup'], '.2f', 'x')})")
            log(f"suite: {title}: opening (warm) ...")
            entry["open"] = run_json([hs_row, "--model", path, "--mode", "open", "--warmup", "1",
                                      "--runs", "1" if args.quick else "3"], hs_env(2))
            entry["reopen"] = reopen(hs_row, path, 1 if args.quick else 3)
            if folder == FAMILY_LONG[0]:
                n = FAMILY_LONG[1]
                log(f"suite: {title}: {n} tokens with every view, 2 threads ...")
                ids_arg = ",".join(str(i) for i in bench_tokens(n, d_vocab))
                entry["long"] = run_side(args, [hs_row, "--model", path, "--token-ids", ids_arg, "--threads", "2",
                                                "--mode", "views", "--warmup", "0", "--runs", "1"], hs_env(2))
            out.append(entry)
    finally:
        args.model = saved
    return out


def family_markdown(families):
    L = ["## Llama-family models", ""]
    if not families:
        return L + ["Not measured (no model folders; tools/bench/run.sh writes them).", ""]
    L.append("Random weights in the shapes of real checkpoints, BF16 on disk (`tools/bench/make_llama_shapes.py`). "
             "PyTorch: `torch_bench.py`'s Llama module, float32, one GEMM per projection, the matrices in "
             "whichever layout PyTorch runs faster on the shape (*PT layout*: nn.Linear's [out, in] through "
             "F.linear, or transposed once to [in, out]; each process times both before its timed passes), "
             "TransformerLens's cache names for these models "
             "(hook_rot_q/k, ln*.hook_scale, mlp.hook_pre_linear); it matches HeadScope's cache to 1e-6 relative "
             "on the Qwen2 test fixture. *views*: the cache plus what the window computes from it for its views "
             "(head thumbnails, the position's decomposition and attribution, concat vs sum, the logit lens grid, "
             "the detector scores), all held at once.")
    L.append("")
    L.append("| model | row | tokens | threads | HeadScope ms | PyTorch ms | speedup | HS RSS MiB | PT RSS MiB | "
             "PT layout |")
    L.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for e in families:
        for r in e["rows"]:
            L.append(f"| {e['title']} | {r['mode']} | {r['tokens']} | {r['threads']} | {fmt_ms(r['hs_ms'])} | "
                     f"{fmt_ms(r['pt_ms'])} | {fx(r['speedup'], '.2f', 'x')} | {fx(r['hs_rss_mb'], '.0f')} | "
                     f"{fx(pt_rss(r), '.0f')} | {layouts_of(r)} |")
        lg = e.get("long")
        if lg and "median_ms" in lg:
            L.append(f"| {e['title']} | views | {lg['tokens']} | {lg['threads']} | {fmt_ms(lg['median_ms'])} | — | — | "
                     f"{fx(lg['peak_rss_mb'], '.0f')} | — | — |")
        elif lg:
            L.append(f"| {e['title']} | views | {FAMILY_LONG[1]} | 2 | stopped after {lg.get('stopped')} s | — | — | — | — "
                     f"| — |")
    L.append("")
    for e in families:
        o = e.get("open")
        if o:
            line = (f"- Opening {e['title']} (warm page cache): median **{fmt_ms(o['median_ms'])} ms**, "
                    f"peak RSS {fx(o['peak_rss_mb'], '.0f')} MiB")
            r = e.get("reopen")
            if r:
                line += (f"; opened again, its packed matrices mapped from the cache on disk: median "
                         f"**{fmt_ms(r['median_ms'])} ms**, and the first 20-token run after it "
                         f"{fmt_ms(r['first_run_median_ms'])} ms (after a first open: {fmt_ms(o['first_run_median_ms'])} ms)")
            L.append(line + ".")
    L.append("")
    return L


def hs_error_of(e: Exception) -> str:
    """The loader's (or hs_bench_row's) own message out of run_json's error: its last line that
    says 'hs_bench_row: ...'."""
    lines = [l.strip() for l in str(e).splitlines() if l.strip()]
    mine = [l for l in lines if l.startswith("hs_bench_row:")]
    return (mine or lines or ["failed"])[-1]


def run_issue24_section(args, hs_row, section):
    """Issue 24's shape of `section`: opening the first time with its pages evicted, 20 tokens
    with the full cache on 2 threads against PyTorch, and (Gemma) 256 tokens with every view's
    data. When HeadScope cannot open the folder, its side records the loader's message and
    PyTorch still runs."""
    folder, title, row_plan = ISSUE24_MODELS[section]
    path = os.path.join(args.family_dir, folder)
    entry = {"section": section, "folder": folder, "title": title, "row": None, "open_cold": None,
             "open_warm": None, "long": None, "hs_error": None}
    if not os.path.isfile(os.path.join(path, "config.json")):
        log(f"suite: {path} is missing (tools/bench/make_gemma_shapes.py writes it); skipping {title}")
        entry["missing"] = True
        return entry
    with open(os.path.join(path, "config.json")) as f:
        d_vocab = json.load(f)["vocab_size"]
    # First: the open, cold (every shard's pages evicted) and with no packed-matrix cache on disk
    # (hs_env's default), as a first open after a download is.
    log(f"suite: {title}: opening the first time (page cache evicted) ...")
    try:
        entry["open_cold"] = run_json([hs_row, "--model", path, "--mode", "open", "--cold", "--warmup", "0",
                                       "--runs", "1"], hs_env(2))
        entry["open_warm"] = run_json([hs_row, "--model", path, "--mode", "open", "--warmup", "0", "--runs", "1"],
                                      hs_env(2))
        log(f"suite:        cold {fmt_ms(entry['open_cold']['median_ms'])} ms "
            f"({fx(max(entry['open_cold']['resident_before_pct'] or [0]), '.0f')}% cached before), warm "
            f"{fmt_ms(entry['open_warm']['median_ms'])} ms")
    except RuntimeError as e:
        entry["hs_error"] = hs_error_of(e)
        log(f"suite:        HeadScope cannot open it: {entry['hs_error']}")
    sides = ("pt",) if entry["hs_error"] else ("hs", "pt")
    rounds, warmup, runs = (1, 1, 3) if args.quick else row_plan
    ids_arg = ",".join(str(i) for i in bench_tokens(ISSUE24_TOKENS, d_vocab))
    saved = args.model
    args.model = path
    try:
        log(f"suite: {title}: cache {ISSUE24_TOKENS} tokens, {ISSUE24_THREADS} threads: {rounds} x "
            f"({', '.join('HeadScope' if k == 'hs' else 'PyTorch' for k in sides)}), {warmup} warm-up + {runs} timed ...")
        try:
            entry["row"] = run_row(args, hs_row, "cache", ISSUE24_TOKENS, ISSUE24_THREADS, ids_arg,
                                   (rounds, warmup, runs), sides)
        except RuntimeError as e:  # HeadScope opened the folder but could not run it
            entry["hs_error"] = hs_error_of(e)
            log(f"suite:        HeadScope failed: {entry['hs_error']}; PyTorch alone")
            entry["row"] = run_row(args, hs_row, "cache", ISSUE24_TOKENS, ISSUE24_THREADS, ids_arg,
                                   (rounds, warmup, runs), ("pt",))
        r = entry["row"]
        log(f"suite:        HeadScope {side_ms(r, 'hs')} ms, PyTorch {side_ms(r, 'pt')} ms "
            f"({fx(r['speedup'], '.2f', 'x')})")
    finally:
        args.model = saved
    if section == ISSUE24_LONG[0] and not entry["hs_error"]:
        n = ISSUE24_LONG[1]
        log(f"suite: {title}: {n} tokens with every view's data (scores and results stored), 2 threads ...")
        ids_arg = ",".join(str(i) for i in bench_tokens(n, d_vocab))
        try:
            entry["long"] = run_side(args, [hs_row, "--model", path, "--token-ids", ids_arg, "--threads", "2",
                                            "--mode", "views", "--store", "scores,results", "--warmup", "0",
                                            "--runs", "1"], hs_env(2))
            if "peak_rss_mb" in entry["long"]:
                log(f"suite:        {fmt_ms(entry['long']['median_ms'])} ms, peak RSS "
                    f"{entry['long']['peak_rss_mb']:.0f} MiB")
        except RuntimeError as e:
            entry["long"] = {"error": hs_error_of(e)}
            log(f"suite:        failed: {entry['long']['error']}")
    return entry


def issue24_targets(entries):
    """[(target, measured, met or None, note)] of issue 24's benchmark targets."""
    out = []
    for e in entries:
        sec, title = e["section"], e["title"]
        name = title.split(" shape")[0]
        why = ("not measured: the folder is missing" if e.get("missing") else
               f"not measured: HeadScope: {e['hs_error']}" if e["hs_error"] else "not measured")
        r = e.get("row")
        goal = ISSUE24_SPEEDUP[sec]
        ok = r is not None and r["speedup"] is not None
        out.append((f"{name} shape, {ISSUE24_TOKENS} tokens, full cache, {ISSUE24_THREADS} threads: at least {goal:g}x "
                    f"faster than PyTorch with a TransformerLens-style cache",
                    f"{fx(r['speedup'], '.2f', 'x')} ({side_ms(r, 'pt')} ms vs {side_ms(r, 'hs')} ms)" if ok else why,
                    r["speedup"] >= goal if ok else None, ""))
        if sec == "gemma2":
            o = e.get("open_cold")
            res = max(o["resident_before_pct"] or [0]) if o else None
            note = (f"{res:.0f}% of the weight files were still in the page cache: not a cold open"
                    if res is not None and res > 5 else "")
            out.append((f"{name} shape opens the first time in under {ISSUE24_OPEN_S:g} s",
                        f"{fmt_ms(o['median_ms'])} ms (page cache evicted, no packed-matrix cache)" if o else why,
                        o["median_ms"] < ISSUE24_OPEN_S * 1e3 if o else None, note))
            lg = e.get("long") or {}
            ok_long = "peak_rss_mb" in lg
            out.append((f"{name} shape, {ISSUE24_LONG[1]} tokens with every view's data: peak RSS under 12 GB "
                        f"({ISSUE24_LONG_MIB} MiB)",
                        f"{lg['peak_rss_mb']:.0f} MiB (whole process: weights mapped + cache + views)" if ok_long
                        else (f"stopped after {lg['stopped']} s" if "stopped" in lg else
                              f"not measured: {lg['error']}" if "error" in lg else why),
                        lg["peak_rss_mb"] < ISSUE24_LONG_MIB if ok_long else None, ""))
    return out


def targets_block_head(begin, end, title, partial_note, shown):
    """A page block's start: its marker, title, note and target table; with no targets (None), the
    whole block saying so."""
    L = [begin, title, ""]
    if partial_note:
        L += [partial_note, ""]
    if shown is None:
        return L + ["Not measured.", end]
    L.append("| target | measured | |")
    L.append("| --- | --- | --- |")
    for t, measured, ok, note in shown:
        L.append(f"| {t} | {measured}{' — ' + note if note else ''} | {'not measured' if ok is None else verdict(ok)} |")
    L.append("")
    return L


def kernels_text(pt_blas) -> str:
    """The BLAS and OpenMP libraries a PyTorch process ran on, as torch_bench.py's threadpoolctl saw them."""
    if not isinstance(pt_blas, list):
        return str(pt_blas)
    return ", ".join(f"{b.get('internal_api')} {b.get('version') or ''} {b.get('architecture') or ''} "
                     f"({b.get('threading_layer') or '-'}, {b.get('num_threads')} threads)".replace("  ", " ")
                     for b in pt_blas)


def issue24_markdown(entries, partial_note=""):
    L = targets_block_head(ISSUE24_BEGIN, ISSUE24_END, "## Gemma 2 and Qwen3 shapes (issue 24)", partial_note,
                           issue24_targets(entries) if entries else None)
    if not entries:
        return L
    L.append("Random weights in the shapes and configs of google/gemma-2-2b and Qwen/Qwen3-0.6B, BF16 on disk "
             "(`tools/bench/make_gemma_shapes.py`; Gemma in three shards cut where the real checkpoint's are). "
             "*HeadScope*: `hs_bench_row` (the forward pass with the full cache, as the rows above). *PyTorch*: "
             "`torch_bench.py`'s Llama-family module in float32 from the BF16 weights, q/k/v in one GEMM, the "
             "matrices in whichever layout PyTorch runs faster on the shape (*PyTorch layout*: nn.Linear's "
             "[out, in] through F.linear with the tied unembedding the embedding itself, or every matrix "
             "transposed once to [in, out]; each process times max(warm-up, 2) passes in both before its timed "
             "passes, and its RSS is the peak after that probe), every TransformerLens key kept "
             "(Qwen3's attn.q_norm.* / attn.k_norm.*; Gemma's ln1_post.* / ln2_post.*, hook_result before the "
             "post-norm, the scores after the soft-cap with the sliding window's mask, the logits after the final "
             "soft-cap); `tools/bench/check_torch_bench.py` checks it against tools/reference's float64 pass "
             "to 1e-5, in both weight layouts, on tiny models of both families with a 3-key window and small "
             "soft-caps. *Opening*: "
             "`hs::Model::load` with every weight file's pages evicted first (`posix_fadvise(DONTNEED)`, no root "
             "needed; the share still cached is printed) and no packed-matrix cache on disk, i.e. a first open; "
             "*warm* right after. *Every view's data*: `hs_bench_row --mode views --store scores,results` "
             "(the full cache with the attention scores and per-head results stored, plus what the window "
             "computes for its views), one pass; its peak RSS is getrusage's `ru_maxrss` of the process.")
    L.append("")
    L.append("| model | HeadScope 20 tokens ms | PyTorch ms | speedup | CPU ms HS / PT | RSS MiB HS / PT | "
             "open cold ms | open warm ms | PyTorch load ms | PyTorch layout | runs per side |")
    L.append("| --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | --- | --- |")
    for e in entries:
        r, oc, ow = e.get("row"), e.get("open_cold"), e.get("open_warm")
        if e.get("missing"):
            L.append(f"| {e['title']} | folder missing | | | | | | | | | |")
            continue
        hs = side_ms(r, "hs") if r and not e["hs_error"] else f"cannot open: {e['hs_error']}"
        pl = f"{statistics.median(r['pt_load_ms']):.0f}" if r and r["pt_load_ms"] else "—"
        L.append(f"| {e['title']} | {hs} | {side_ms(r, 'pt') if r else '—'} | "
                 f"{fx(r['speedup'], '.2f', 'x') if r else '—'} | "
                 f"{fmt_ms(r.get('hs_cpu_ms')) if r else '—'} / {fmt_ms(r.get('pt_cpu_ms')) if r else '—'} | "
                 f"{fx(r['hs_rss_mb'], '.0f') if r else '—'} / {fx(pt_rss(r), '.0f') if r else '—'} | "
                 f"{fmt_ms(oc['median_ms']) if oc else '—'} | {fmt_ms(ow['median_ms']) if ow else '—'} | {pl} | "
                 f"{layouts_of(r) if r else '—'} | "
                 f"{r['rounds']} x ({r['warmup']} warm-up + {r['runs']}) |" if r else "| — |")
        lg = e.get("long")
        if lg and "peak_rss_mb" in lg:
            L.append("")
            L.append(f"{e['title']}, {lg['tokens']} tokens with every view's data on {lg['threads']} threads: "
                     f"{fmt_ms(lg['median_ms'])} ms, peak RSS **{lg['peak_rss_mb']:.0f} MiB** (the cache alone "
                     f"{fx(lg.get('cache_mb'), '.0f')} MiB).")
    L.append("")
    blas = next((e["row"]["pt_blas"] for e in entries if e.get("row") and e["row"].get("pt_blas")), None)
    if blas:
        L.append(f"PyTorch ran on (threadpoolctl, in the timed process): {kernels_text(blas)}; "
                 f"OPENBLAS_CORETYPE {best_coretype() or 'not set'} (`tools/bench/openblas_env.py`).")
        L.append("")
    L.append("Reproduce these alone (the rest of this page is kept): `tools/bench/run.sh --sections gemma2,qwen3`.")
    L.append(ISSUE24_END)
    return L


def run_units_section(args, hs_keys, cli):
    """Issue 25's speed targets: the Features view's keystroke against the Attention view's, and
    scan --units sae:... against the same scan without it; each pair in alternating rounds."""
    sae = os.path.abspath(args.sae or os.path.join(os.path.dirname(args.model), "sae16k"))
    e = {"sae": sae, "keys": {}, "scan": {}}
    if not os.path.isfile(os.path.join(sae, "cfg.json")):
        e["missing"] = f"{sae} is missing (tools/bench/make_bench_sae.py writes it; run.sh does)"
        log(f"suite: {e['missing']}; skipping issue 25's section")
        return e
    # Three rounds: on a VM whose freed memory goes back to the host (free page reporting) a
    # process's first keys fault their memory in again, in either view, and single keys vary 2-3x.
    rounds = 1 if args.quick else 3
    env = dict(os.environ)
    env.setdefault("QT_QPA_PLATFORM", "offscreen")
    env["OMP_NUM_THREADS"] = str(os.cpu_count() or 1)
    per_key = {v: {"end": [], "middle": []} for v in ("attention", "features")}
    if os.access(hs_keys, os.X_OK):
        for r in range(rounds):
            for view in ("attention", "features"):
                log(f"suite: typing with the {view} view on screen (hs_bench_keys --sae, round {r + 1} of {rounds}) ...")
                try:
                    out = run_json([hs_keys, "--model", args.model, "--sae", sae, "--view", view, *UNITS_KEYS_ARGS],
                                   env, timeout=900)
                except (RuntimeError, subprocess.TimeoutExpired) as ex:
                    e["keys_error"] = str(ex).splitlines()[0]
                    log(f"suite: hs_bench_keys --view {view} failed: {ex}")
                    break
                for phase in ("end", "middle"):
                    per_key[view][phase] += out[phase]["views_ms_per_key"]
                log(f"suite:        end {out['end']['views_ms']['median']:.1f} ms, middle "
                    f"{out['middle']['views_ms']['median']:.1f} ms (median)")
    else:
        e["keys_error"] = f"{hs_keys} is missing"
    for phase in ("end", "middle"):
        a, f = per_key["attention"][phase], per_key["features"][phase]
        if a and f:
            e["keys"][phase] = {"attention_ms": statistics.median(a), "features_ms": statistics.median(f),
                                "attention_mean_ms": statistics.fmean(a), "features_mean_ms": statistics.fmean(f),
                                "keys": [len(a), len(f)]}
            e["keys"][phase]["ratio"] = e["keys"][phase]["features_ms"] / e["keys"][phase]["attention_ms"]
    prompts = os.path.join(REPO, "resources", "models", "headscope-tiny", "heldout.jsonl")
    times = {"plain": [], "units": [], "dashboards": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for kind in ("plain", "units"):
                out = os.path.join(tmp, f"scan_{kind}_{r}.json")
                cmd = [cli, "scan", "--model", args.model, "--input", prompts, "--limit", str(UNITS_SCAN_PROMPTS),
                       "--max-tokens", str(UNITS_SCAN_TOKENS), "--threads", "2", "-o", out]
                if kind == "units":
                    cmd += ["--units", "sae:" + sae]
                log(f"suite: headscope-cli scan {'--units sae:' + os.path.basename(sae) if kind == 'units' else 'without units'}"
                    f" (round {r + 1} of {rounds}) ...")
                p = subprocess.run(cmd, env=hs_env(2), capture_output=True, text=True, timeout=1800)
                took = re.search(r"scanned in ([0-9.]+) s", p.stderr)
                if p.returncode != 0 or not took:
                    e["scan_error"] = (p.stderr.strip().splitlines() or ["no output"])[-1]
                    log(f"suite: the scan failed: {p.stderr[-1500:]}")
                    break
                times[kind].append(float(took.group(1)))
                wrote = re.search(r"written in ([0-9.]+) s", p.stderr)
                if wrote:
                    times["dashboards"].append(float(wrote.group(1)))
                log(f"suite:        scanned in {took.group(1)} s" + (f", dashboards written in {wrote.group(1)} s" if wrote else ""))
                shutil.rmtree(os.path.join(tmp, f"scan_{kind}_{r}.units"), ignore_errors=True)
            if "scan_error" in e:
                break
    if times["plain"] and times["units"]:
        e["scan"] = {"plain_s": statistics.median(times["plain"]), "units_s": statistics.median(times["units"]),
                     "dashboards_s": statistics.median(times["dashboards"]) if times["dashboards"] else None,
                     "runs": times}
        e["scan"]["ratio"] = e["scan"]["units_s"] / e["scan"]["plain_s"]
    return e


def units_targets(e):
    """[(target, measured, met or None, note)] of issue 25's speed targets."""
    if e is None:
        return []
    why = e.get("missing") or "not measured"
    out = []
    for phase, where in (("end", "at the end of a 127-token document"), ("middle", "in its middle")):
        k = e["keys"].get(phase)
        out.append((f"issue 25: keystroke with the Features view (16,384-latent SAE, GPT-2 small) {where}: at most "
                    f"{UNITS_KEYSTROKE_GOAL:g}x the Attention view's",
                    f"{k['ratio']:.2f}x ({fmt_ms(k['features_ms'])} vs {fmt_ms(k['attention_ms'])} ms, median of "
                    f"{k['keys'][1]} and {k['keys'][0]} keys)" if k else e.get("keys_error", why),
                    k["ratio"] <= UNITS_KEYSTROKE_GOAL if k else None, ""))
    sc = e["scan"]
    out.append((f"issue 25: scan --units sae:... (16,384 latents) at most {UNITS_SCAN_GOAL:g}x the same scan without it",
                f"{sc['ratio']:.2f}x ({sc['units_s']:.2f} vs {sc['plain_s']:.2f} s)" if sc else e.get("scan_error", why),
                sc["ratio"] <= UNITS_SCAN_GOAL if sc else None,
                f"writing the 16,384 dashboards once after the scan: {sc['dashboards_s']:.1f} s more"
                if sc and sc.get("dashboards_s") is not None else ""))
    return out


def units_markdown(e, partial_note=""):
    L = targets_block_head(ISSUE25_BEGIN, ISSUE25_END, "## Units below the head (issue 25)", partial_note,
                           units_targets(e) if e is not None else None)
    if e is None:
        return L
    L.append("On the GPT-2-small-shaped model with a random 16,384-latent TopK SAE (k 64) at `blocks.6.hook_resid_pre` "
             "(`tools/bench/make_bench_sae.py`). *Keystroke*: `hs_bench_keys --model … --sae … --view attention|features "
             + " ".join(UNITS_KEYS_ARGS) + "`, the two views in alternating processes; a key's time runs from the "
             "request (after the debounce) to the data of what is on screen (the run, the head grid and the shown "
             "view's analysis: for the Features view the SAE's latents at every position, the top latents and the "
             "chosen latent's logit effects; its attributions follow as a second stage on a low-priority thread). "
             f"*Scan*: `headscope-cli scan --input resources/models/headscope-tiny/heldout.jsonl --limit "
             f"{UNITS_SCAN_PROMPTS} --max-tokens {UNITS_SCAN_TOKENS} --threads 2` with every aggregate, with and without "
             "`--units sae:…`, alternating; the time is the scan's own (`scanned in`, the prompts alone); writing the "
             "dashboards follows once, whatever the number of prompts, and is shown apart.")
    L.append("")
    if e["keys"]:
        L.append("| keys typed | Attention view median / mean ms | Features view median / mean ms | ratio (median) |")
        L.append("| --- | ---: | ---: | ---: |")
        for phase in ("end", "middle"):
            k = e["keys"].get(phase)
            if k:
                L.append(f"| {phase} ({k['keys'][0]} / {k['keys'][1]} keys) | {fmt_ms(k['attention_ms'])} / "
                         f"{fmt_ms(k['attention_mean_ms'])} | {fmt_ms(k['features_ms'])} / {fmt_ms(k['features_mean_ms'])} | "
                         f"{k['ratio']:.2f}x |")
        L.append("")
    if e["scan"]:
        sc = e["scan"]
        L.append(f"Scan runs (s): without units {', '.join(f'{x:.2f}' for x in sc['runs']['plain'])}; with "
                 f"`--units sae:…` {', '.join(f'{x:.2f}' for x in sc['runs']['units'])}; dashboards written in "
                 f"{', '.join(f'{x:.1f}' for x in sc['runs']['dashboards']) or '—'}.")
        L.append("")
    L.append(ISSUE25_END)
    return L


def patch_markdown(patch_rows):
    L = ["## Activation patching sweep", ""]
    if not patch_rows:
        return L + ["Not measured.", ""]
    L.append("| target | measured | |")
    L.append("| --- | --- | --- |")
    for t, measured, ok, note in patch_targets(patch_rows):
        L.append(f"| {t} | {measured}{' — ' + note if note else ''} | {'not measured' if ok is None else verdict(ok)} |")
    L.append("")
    L.append(f"The GPT-2-small-shaped model above, a {PATCH_TOKENS}-token prompt (the forward rows' ids) and a "
             "corrupted one with position 1 changed; the metric logit(11) - logit(13) at the last position. Each side "
             "is timed from the two prompts to the finished sweep: the clean and the corrupted run, then every patched "
             "run. *HeadScope*: `hs::patching_sweep` (hs_bench_row --mode patch; every cell computed, none skipped as "
             "unchanged): the corrupted run's cache up to the patched layer and position is reused, all patched runs "
             "go through each layer together, and only the last position's metric is computed. *PyTorch*: "
             "TransformerLens's conventions (torch_bench.py --mode patch: `hsref.patching_sweep` in float32 on weights "
             "converted once, under `torch.inference_mode()`): one full forward pass of the corrupted prompt per cell "
             "with a hook that copies the clean activation in, the metric read from the full logits. Medians in "
             "milliseconds; *CPU ms* as above.")
    L.append("")
    L.append("| activation | patched runs | threads | HeadScope ms | of which the sweep | PyTorch ms | speedup | "
             "CPU ms HS / PT | HeadScope RSS MiB | PyTorch RSS MiB | sweeps per side |")
    L.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in patch_rows:
        cpu = f"{fmt_ms(r.get('hs_cpu_ms'))} / {fmt_ms(r.get('pt_cpu_ms'))}"
        L.append(f"| {r['what']} | {r['cells']} | {r['threads']} | {side_ms(r, 'hs')} | {fmt_ms(r['hs_sweep_ms'])} | "
                 f"{side_ms(r, 'pt')} | {fx(r['speedup'], '.1f', 'x')} | {cpu} | {fx(r['hs_rss_mb'], '.0f')} | "
                 f"{fx(r['pt_rss_mb'], '.0f')} | HS {r['rounds']} x ({r['hs_plan'][0]} + {r['hs_plan'][1]}), "
                 f"PT {r['rounds']} x ({r['pt_plan'][0]} + {r['pt_plan'][1]}) |")
    L.append("")
    return L


# ----------------------------------------------------------------------------------------------
# Profile (perf, software clock: hardware counters are often missing in virtual machines)


def perf_works() -> bool:
    if not shutil.which("perf"):
        return False
    with tempfile.TemporaryDirectory() as d:
        p = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-o", os.path.join(d, "p.data"), "--", "true"],
                           capture_output=True, text=True)
        return p.returncode == 0


def short_symbol(sym: str, dso: str) -> str:
    """Makes Eigen's template names readable: the kernel's name, not its 2 KB of arguments."""
    s = re.sub(r"(\s+-)+\s*$", "", sym).strip()
    if re.fullmatch(r"0x[0-9a-f]+", s):  # no symbols (libgomp): the library is the answer
        return "(OpenMP runtime: fork/join, barrier waits)" if "gomp" in dso else f"({dso})"
    tag = ""
    if "gemm_pack" in s:  # which operand layout is being packed tells which product it is
        mm = re.search(r"const_blas_data_mapper<float, long, (\d)>", s)
        if mm:
            tag = " [row-major source]" if mm.group(1) == "1" else " [col-major source]"
    s = re.sub(r"\(anonymous namespace\)::", "", s)
    for _ in range(12):  # drop template argument lists, innermost first
        s2 = re.sub(r"<[^<>]*>", "", s)
        if s2 == s:
            break
        s = s2
    s = re.sub(r"\(.*\)", "()", s).replace("::operator()", "")
    return (s[:100] + tag).strip()


def profile(hs_row, model, mode, tokens, threads, warmup, runs, ids_arg, user_only=True):
    """Flat profile of the timed part only (hs_bench_row switches perf on around it)."""
    with tempfile.TemporaryDirectory() as d:
        data, ctl, ack = (os.path.join(d, x) for x in ("perf.data", "ctl", "ack"))
        os.mkfifo(ctl)
        os.mkfifo(ack)
        env = hs_env(threads)
        env.update(HEADSCOPE_PERF_CTL=ctl, HEADSCOPE_PERF_ACK=ack)
        event = "cpu-clock:u" if user_only else "cpu-clock"
        cmd = ["perf", "record", "-q", "-e", event, "-F", "1000", "--control", f"fifo:{ctl},{ack}", "-D", "-1",
               "-o", data, "--", hs_row, "--model", model, "--mode", mode, "--threads", str(threads),
               "--warmup", str(warmup), "--runs", str(runs)]
        if ids_arg:
            cmd += ["--token-ids", ids_arg]
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        except subprocess.TimeoutExpired:
            return None
        if p.returncode != 0:
            log(f"suite: perf record failed: {p.stderr.strip()[-300:]}")
            return None
        rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "--sort", "dso,symbol",
                              "--percent-limit", "0.3"], capture_output=True, text=True, timeout=300).stdout
    merged = {}
    for line in rep.splitlines():
        mm = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[([.kH])\]\s+(.*)$", line)
        if not mm:
            continue
        pct, dso, kind, sym = float(mm.group(1)), mm.group(2), mm.group(3), mm.group(4)
        name = "(kernel: page faults, scheduling, ...)" if kind == "k" else short_symbol(sym, dso)
        key = ("kernel" if kind == "k" else dso, name)
        merged[key] = merged.get(key, 0.0) + pct
    return sorted(((v, k[0], k[1]) for k, v in merged.items()), reverse=True)[:12]


# ----------------------------------------------------------------------------------------------
# Report


def fmt_ms(x):
    if x is None:
        return "—"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}"


def fx(x, spec=".2f", suffix=""):
    return "—" if x is None else f"{x:{spec}}{suffix}"


def side_ms(r, k):
    """A side's time for tables: the median, '> N s (stopped)' when it never finished a pass."""
    if r[f"{k}_ms"] is None:
        return f"> {r[f'{k}_stopped_s']} s (stopped)" if r.get(f"{k}_stopped_s") else "—"
    return fmt_ms(r[f"{k}_ms"]) + ("*" if r.get(f"{k}_early") else "")


def pt_rss(r):
    """PyTorch's peak RSS for the Llama-family tables: after its layout probe (VmHWM reset) when
    the kernel allows the reset, since the probe holds both layouts' matrices for a moment (a
    tied unembedding's transposed copy: 2.2 GiB on Gemma-2-2B); else the whole process's."""
    return r.get("pt_run_rss_mb") or r.get("pt_rss_mb")


def layouts_of(r):
    """The weight layout(s) torch_bench.py timed as faster and used, over the row's processes."""
    return ", ".join(r.get("pt_layouts") or []) or "—"


def verdict(ok):
    return "**met**" if ok else "**not met**"


def targets(rows, open_warm, open_cold, keys, peak=None):
    """[(target, measured, met or None, note)]"""
    find = lambda mode, n, t: next((r for r in rows if (r["mode"], r["tokens"], r["threads"]) == (mode, n, t)), None)  # noqa: E731
    out = []
    r2 = find("cache", 20, 2)
    if r2:
        hs = r2["hs_ms"]
        out.append(("20 tokens, full cache, 2 threads: at most 30 ms", f"{side_ms(r2, 'hs')} ms",
                    hs is not None and hs <= 30, ""))
        out.append(("20 tokens, full cache, 2 threads: at least 3.5x faster than PyTorch",
                    f"{fx(r2['speedup'], '.2f', 'x')} ({side_ms(r2, 'pt')} ms vs {side_ms(r2, 'hs')} ms)",
                    r2["speedup"] is not None and r2["speedup"] >= 3.5, ""))
        if peak and hs is not None:
            floor = peak["floor_ms_threads"]
            out.append(("20 tokens, full cache, 2 threads: within 2x of the compute floor",
                        f"{hs / floor:.2f}x the floor ({side_ms(r2, 'hs')} ms; floor {floor:.1f} ms = "
                        f"{peak['pass_gflop']:.2f} GFLOP at the measured {peak['gflops_threads']:.0f} GFLOP/s)",
                        hs <= 2 * floor, ""))
    r1 = find("cache", 20, 1)
    if r1:
        note = ""
        if r1.get("hs_cpu_ms") and r1.get("pt_cpu_ms"):
            note = (f"by CPU time per pass {r1['pt_cpu_ms'] / r1['hs_cpu_ms']:.2f}x ({fmt_ms(r1['pt_cpu_ms'])} ms vs "
                    f"{fmt_ms(r1['hs_cpu_ms'])} ms)")
        out.append(("20 tokens, full cache, 1 thread: at least 2.5x faster than PyTorch",
                    f"{fx(r1['speedup'], '.2f', 'x')} ({side_ms(r1, 'pt')} ms vs {side_ms(r1, 'hs')} ms)",
                    r1["speedup"] is not None and r1["speedup"] >= 2.5, note))
    long_rows = [r for r in rows if r["mode"] == "cache" and r["tokens"] == 1024 and r["hs_rss_mb"] is not None]
    if long_rows:
        peak = max(r["hs_rss_mb"] for r in long_rows)
        out.append(("1024 tokens, every view available: peak RSS under 1.5 GB (1536 MiB)",
                    f"{peak:.0f} MiB (whole process: weights mapped + cache)", peak < 1536, ""))
    else:
        out.append(("1024 tokens, every view available: peak RSS under 1.5 GB", "not run (--quick)", None, ""))
    if open_warm:
        note = f"cold page cache: {fmt_ms(open_cold['median_ms'])} ms" if open_cold else ""
        out.append(("Open GPT-2 small: under 0.5 s", f"{fmt_ms(open_warm['median_ms'])} ms (warm page cache)",
                    open_warm["median_ms"] < 500, note))
    if keys and "views_ms" in keys:
        fallback = keys["model_kind"] != "builtin"
        note = "on the test fixture: the built-in model is not in resources/models yet" if fallback else ""
        v = keys["views_ms"]
        work = ""
        if keys.get("sync_run_incremental_ms") and keys.get("sync_layer_ms") and keys.get("sync_position_ms"):
            work = (f"; the work itself, called directly: {keys['sync_run_incremental_ms']['median']:.1f} ms run + "
                    f"{keys['sync_position_ms']['median']:.1f} + {keys['sync_layer_ms']['median']:.1f} ms analyses")
        out.append(("Built-in model: keystroke to ready data under 5 ms (median)",
                    f"median {v['median']:.1f} ms, p90 {v['p90']:.1f}, max {v['max']:.1f} (after the "
                    f"{keys['debounce_setting_ms']} ms debounce){work}", v["median"] < 5, note))
        long = keys.get("long")
        if long and "end" in long:
            e, mid = long["end"], long.get("middle", {})
            rss = e.get("rss_mb_per_key") or [0]
            out.append((f"{long['document_positions']}-token prompt (benchmark model): typing at the end, at most 40 ms "
                        f"a key to ready data (median)",
                        f"run ready: median {e['run_ms']['median']:.1f} ms (worker {e['worker_ms']['median']:.1f} ms); "
                        f"every view's data: median {e['views_ms']['median']:.1f} ms; resident memory over "
                        f"{len(rss)} keys {min(rss):.0f}-{max(rss):.0f} MiB; in the middle: views median "
                        f"{mid.get('views_ms', {}).get('median', float('nan')):.0f} ms, reusing "
                        f"{(mid.get('reused_prefix') or [0])[0]} positions", e["run_ms"]["median"] <= 40,
                        "after the debounce; the work of a key called directly: "
                        f"{long['sync_end_compute_run_ms']['median']:.1f} ms run, "
                        f"{long['sync_end_layer_ms']['median']:.1f} ms concat-vs-sum"))
            mem = e.get("memory")
            if mem and mem.get("slope_keys", 0) >= 100:
                # Issue 21: resident memory grew 1.5 MB a key. What a key may add is what the cache
                # gains (the live position blocks) and the freed blocks kept for the next key (at most
                # 64 MB); the rest is memory nobody uses.
                kept = mem["blocks_mb_per_key_slope"] + mem.get("pooled_mb_per_key_slope", 0.0)
                excess = mem["rss_mb_per_key_slope"] - kept
                at = ", ".join(f"key {k}: {v:.0f}" for k, v in mem["rss_mb_at_key"].items())
                out.append((f"Typing {len(rss)} keys at the end of the {long['document_positions']}-token prompt: resident "
                            f"memory grows no faster than the cache (slope over the last {mem['slope_keys']} keys)",
                            f"resident {mem['rss_mb_per_key_slope']:.2f} MB/key, the cache's live and pooled blocks "
                            f"{kept:.2f} MB/key (resident MiB at {at})",
                            excess <= 0.1, "the cache grows by a token every ~5 keys"))
        busy = keys.get("stall_max_busy_ms")
        out.append(("GUI thread never stalls more than 16 ms while typing",
                    f"longest stall {keys['stall_max_ms']:.1f} ms"
                    + (f" (the GUI thread's own CPU time in one gap: at most {busy:.1f} ms)" if busy is not None else ""),
                    keys["stall_max_ms"] <= 16, note))
    else:
        out.append(("Built-in model: keystroke latency and GUI stalls", "not measured (no GUI build, or --no-gui)", None, ""))
    return out


def console_table(rows):
    lines = [f"{'mode':<7}{'tokens':>7}{'thr':>4}  {'HeadScope ms':>12}  {'PyTorch ms':>11}  {'HS/PT':>6}  "
             f"{'speedup':>7}  {'HS RSS MiB':>10}  {'PT RSS MiB':>10}"]
    for r in rows:
        lines.append(f"{r['mode']:<7}{r['tokens']:>7}{r['threads']:>4}  {side_ms(r, 'hs'):>12}  {side_ms(r, 'pt'):>11}  "
                     f"{fx(r['ratio']):>6}  {fx(r['speedup'], '.2f', 'x'):>7}  {fx(r['hs_rss_mb'], '.0f'):>10}  "
                     f"{fx(r['pt_rss_mb'], '.0f'):>10}")
    return "\n".join(lines)


def markdown(args, m, rows, open_warm, open_cold, keys, profiles, load_start, load_end, elapsed_s, old_notes,
             patch_rows=(), families=(), grad_rows=(), atp_rows=(), issue24=(), units=None):
    now = datetime.datetime.now().astimezone()
    cores = m["cores"] or 1
    # Other work's share of the CPU during the run: the machine's busy time minus the suite's own
    # (the load average counts the suite's processes too, so it cannot tell).
    others = m.get("others_cores", 0.0)
    loaded = others > 0.1 * cores
    L = []
    L.append("# Benchmarks")
    L.append("")
    L.append("<!-- Generated by tools/bench/run.sh (tools/bench/suite.py). Edit only between the notes markers. -->")
    L.append("")
    if loaded or args.quick:
        why = []
        if loaded:
            why.append(f"**measured under load**: other processes used {others:.2f} of the {cores} cores on "
                       f"average during the run")
        if args.quick:
            why.append("**a `--quick` smoke run**: few runs per row, 1024-token rows skipped or single-shot")
        L.append("> **Draft numbers.** This page was " + "; and ".join(why) +
                 ". Re-run `tools/bench/run.sh` on a quiet machine for numbers to quote.")
        L.append("")
    L.append(f"Measured {now.strftime('%Y-%m-%d %H:%M %Z')} with `{args.command}` "
             f"(HeadScope at commit {m['commit']}); the whole run took {elapsed_s / 60:.1f} minutes.")
    L.append("")
    L.append("## Machine")
    L.append("")
    L.append(f"- CPU: {m['cpu']}, {m['cores']} cores ({m['threads_per_core']} thread per core)"
             + (f", virtual machine ({m['hypervisor']})" if m["hypervisor"] != "?" else "")
             + f"; {m['simd']}; L2 {m['l2']}, L3 {m['l3']}")
    L.append(f"- RAM: {m['ram_gb']} GB; {m['os']}, kernel {m['kernel']}")
    L.append(f"- Compiler: {m['compiler']}; {m['cmake']}; build: {m['cmake_flags']}; Eigen {m['eigen']}")
    L.append(f"- HeadScope's BLAS: {m['hs_blas']}; OpenMP: {m['hs_openmp']}")
    L.append(f"- PyTorch {m['torch']} (Debian's python3-torch), NumPy {m['numpy']}, {m['python']}; "
             f"BLAS loaded by torch: {m['torch_blas']}")
    ct = m["openblas_coretype_in_env"]
    pt_row = next((r for r in rows if r.get("pt_blas")), None)
    if pt_row:
        L.append(f"- PyTorch's rows ran on (threadpoolctl, in the timed process): {kernels_text(pt_row['pt_blas'])}; malloc: "
                 f"{pt_row['pt_malloc']} (torch_bench.py sets glibc's as HeadScope sets its own)")
    L.append(f"- Other processes' CPU use during the run: {others:.2f} cores on average (the machine's busy time "
             f"minus the suite's own).")
    L.append(f"- Load average (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in load_start)} at the start, "
             f"{' '.join(f'{x:.2f}' for x in load_end)} at the end. OPENBLAS_CORETYPE in the environment: "
             f"{ct if ct else 'not set'}; for the PyTorch commands: "
             f"{best_coretype() or 'not set (OpenBLAS chooses)'} (tools/bench/openblas_env.py: chosen from the CPU's instruction sets).")
    L.append("")
    L.append("## Targets (issue 5)")
    L.append("")
    L.append("| target | measured | |")
    L.append("| --- | --- | --- |")
    for t, measured, ok, note in targets(rows, open_warm, open_cold, keys, m.get("peak")):
        status = "not measured" if ok is None else verdict(ok)
        L.append(f"| {t} | {measured}{' — ' + note if note else ''} | {status} |")
    L.append("")
    L.append("## Forward pass: HeadScope and PyTorch on the same weights")
    L.append("")
    L.append("GPT-2-small-shaped model with random weights (12 layers, 12 heads, d_model 768, d_mlp 3072, "
             "vocab 50257, context 1024; F32, 498 MB) written by `tools/bench/make_gpt2_small.py`. "
             "*cache*: HeadScope keeps its `ActivationCache` (default `hs::RunOptions`: every key of the "
             "contract available, scores and per-head results derived on request), PyTorch keeps every "
             "activation of the contract as tensors (`torch_bench.py --mode cache`, like TransformerLens's "
             "`run_with_cache`). *logits*: logits only on both sides. Times are medians over all timed passes "
             "of the row in milliseconds (lower is better); *HS/PT* is HeadScope's time divided by PyTorch's, "
             "*speedup* the inverse. *RSS* is the peak resident set of the process (getrusage `ru_maxrss`), "
             "weights included; *run RSS* is the peak during the timed passes only. *CPU ms* is the process's CPU "
             "time per pass (median; all threads): with 1 thread it leaves out the time spent waiting for a core, "
             "so it is the better guide when the machine is loaded (it still includes the slowdown from caches and "
             "memory bandwidth shared with other work); with 2 threads it also counts OpenMP's spin-waiting and "
             "is no speed measure.")
    L.append("")
    L.append("| mode | tokens | threads | HeadScope ms | PyTorch ms | HS/PT | speedup | CPU ms HS / PT | HeadScope RSS MiB "
             "| PyTorch RSS MiB | HS run RSS | PT run RSS | HS cache MiB | runs per side |")
    L.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        hr = f"{r['hs_run_rss_mb']:.0f}" if r["hs_run_rss_mb"] else "—"
        pr = f"{r['pt_run_rss_mb']:.0f}" if r["pt_run_rss_mb"] else "—"
        cm = f"{r['hs_cache_mb']:.0f}" if r["hs_cache_mb"] is not None else "—"
        cpu = (f"{fmt_ms(r.get('hs_cpu_ms'))} / {fmt_ms(r.get('pt_cpu_ms'))}"
               if r.get("hs_cpu_ms") is not None or r.get("pt_cpu_ms") is not None else "—")
        L.append(f"| {r['mode']} | {r['tokens']} | {r['threads']} | {side_ms(r, 'hs')} | {side_ms(r, 'pt')} | "
                 f"{fx(r['ratio'])} | {fx(r['speedup'], '.2f', 'x')} | {cpu} | {fx(r['hs_rss_mb'], '.0f')} | "
                 f"{fx(r['pt_rss_mb'], '.0f')} | {hr} | "
                 f"{pr} | {cm} | {r['rounds']} x ({r['warmup']} warm-up + {r['runs']}) |")
    L.append("")
    L.append("How: for each row, HeadScope (`hs_bench_row`) and PyTorch (`torch_bench.py`) run in separate processes, "
             "alternating (HeadScope, PyTorch, HeadScope, PyTorch, ...) for the number of rounds shown; each process "
             "loads the model, warms up, then times its passes. Both get the same token ids, `OMP_NUM_THREADS` and "
             "explicit thread counts (`omp_set_num_threads` / `torch.set_num_threads`); PyTorch runs under "
             "`torch.inference_mode()` with `OPENBLAS_CORETYPE` removed from its environment. The 1024-token rows "
             "use fewer passes (a pass takes seconds); their medians are rougher. A time marked * comes from a process "
             "that stopped adding passes after `--max-process-seconds`; *(stopped)* means the process had not "
             "finished a single timed pass within twice that (plus two minutes) and was ended.")
    L.append("")
    mins = [f"{r['mode']} {r['tokens']}/{r['threads']}t: {fmt_ms(r['hs_min_ms'])} vs {fmt_ms(r['pt_min_ms'])}"
            for r in rows if r["tokens"] == 20]
    if mins:
        L.append("Fastest single pass at 20 tokens (HeadScope vs PyTorch, ms): " + "; ".join(mins) + ".")
        L.append("")
    L += patch_markdown(list(patch_rows))
    L += grad_markdown(list(grad_rows), list(atp_rows)) + [""]
    L += family_markdown(list(families))
    L += issue24_markdown(list(issue24)) + [""]
    L += units_markdown(units) + [""]
    L.append("## Opening the model")
    L.append("")
    if open_warm:
        L.append(f"`hs::Model::load` of the 498 MB GPT-2-small folder (safetensors memory-mapped, every weight checked "
                 f"for NaN/inf, the matrices packed for the forward pass, tokenizer read): median **{fmt_ms(open_warm['median_ms'])} ms** with the file in the "
                 f"page cache (warm; {len(open_warm['runs'])} loads, min {fmt_ms(open_warm['min_ms'])} ms).")
        r = open_warm.get("reopen")
        if r:
            L.append(f"Opened again, with its packed matrices mapped from the cache on disk that the first open wrote "
                     f"(`core/model/pack_cache.h`; the NaN/inf check of the float32 weights still reads them): median "
                     f"**{fmt_ms(r['median_ms'])} ms** ({len(r['runs'])} loads, {r['from_pack_cache']} from the cache); "
                     f"the first 20-token run after it {fmt_ms(r['first_run_median_ms'])} ms, against "
                     f"{fmt_ms(open_warm['first_run_median_ms'])} ms after a first open.")
        if open_cold:
            res = open_cold.get("resident_before_pct") or []
            res_txt = f"; {max(res):.0f}% of the file was still cached at the start of a load" if res else ""
            L.append(f"Cold (the file's pages evicted with `posix_fadvise(DONTNEED)` before each load, so they are read "
                     f"from disk{res_txt}): median **{fmt_ms(open_cold['median_ms'])} ms** over {len(open_cold['runs'])} "
                     f"loads. The check and the packing read every weight, so a cold open reads the whole file from disk.")
        pl = [x for r in rows for x in r["pt_load_ms"]]
        if pl:
            L.append(f"For comparison, `torch_bench.py` reads the same file into memory and wraps it in tensors in a median "
                     f"{fmt_ms(statistics.median(pl))} ms (warm).")
    else:
        L.append("Not measured.")
    L.append("")
    L.append("## Typing in the GUI")
    L.append("")
    if keys and "views_ms" in keys:
        if keys["model_kind"] != "builtin":
            L.append(f"> The built-in model (resources/models/headscope-tiny) is not there yet, so this used the test "
                     f"fixture `{os.path.relpath(keys['model'], REPO)}` ({keys['n_layer']} layers x {keys['n_head']} heads, "
                     f"d_model {keys['d_model']}, context {keys['n_ctx']}): re-run once the built-in model is committed.")
            L.append("")
        v, rr, d, w = keys["views_ms"], keys["run_ms"], keys["debounce_ms"], keys["worker_ms"]
        L.append(f"`hs_bench_keys` opens the real window on Qt's offscreen platform and types "
                 f"\"{keys['sentence']}\" into the prompt ({keys['keys']} keys, {keys['tokens_at_end']} tokens at the end) "
                 f"with `QTest::keyClicks`" + ("" if keys.get("qtest") else " (QtTest missing: text inserted directly)") + ".")
        L.append("")
        L.append("| per keystroke | median ms | p90 ms | max ms |")
        L.append("| --- | ---: | ---: | ---: |")
        L.append(f"| debounce: text change to the run's request (setting {keys['debounce_setting_ms']} ms) | "
                 f"{d['median']:.1f} | {d['p90']:.1f} | {d['max']:.1f} |")
        L.append(f"| request to the run's result on the GUI thread | {rr['median']:.2f} | {rr['p90']:.2f} | {rr['max']:.2f} |")
        L.append(f"| request to every view's data ready (run, position and layer analyses) | {v['median']:.2f} | "
                 f"{v['p90']:.2f} | {v['max']:.2f} |")
        L.append(f"| of which on the worker: tokenize, forward, top-k, thumbnails | {w['median']:.2f} | {w['p90']:.2f} | "
                 f"{w['max']:.2f} |")
        if keys.get("window_slot_ms"):
            ws = keys["window_slot_ms"]
            L.append(f"| of which in the window's slot for the run, on the GUI thread (≈) | {ws['median']:.2f} | "
                     f"{ws['p90']:.2f} | {ws['max']:.2f} |")
        for key, what in (("sync_run_incremental_ms", "run extending the previous prompt by one key"),
                          ("sync_run_full_ms", "run of the whole prompt"),
                          ("sync_position_ms", "position analysis (decomposition, DLA, top-k)"),
                          ("sync_layer_ms", "layer analysis (concat vs sum, head images)")):
            if keys.get(key):
                x = keys[key]
                L.append(f"| same work, called directly on one thread: {what} | {x['median']:.2f} | {x['p90']:.2f} | "
                         f"{x['max']:.2f} |")
        L.append("")
        L.append(f"GUI thread: a 1 ms timer ticks throughout; the longest gap between ticks, minus 1 ms, is the longest "
                 f"stall. One key at a time, each waited for: **{keys['stall_step_max_ms']:.1f} ms** "
                 f"({keys['stall_step_over16']} gaps over 16 ms). Typing at one key per {keys['typing_interval_ms']} ms "
                 f"(runs overlapping keys): **{keys['stall_typing_max_ms']:.1f} ms** ({keys['stall_typing_over16']} gaps "
                 f"over 16 ms). The GUI thread's own CPU time within a gap was at most {keys.get('stall_max_busy_ms', 0):.1f} ms: "
                 f"a longer gap is the scheduler running other work. Keystroke latency counts from the run's request, "
                 f"i.e. after the debounce, which is a deliberate wait reported on its own line.")
        slow = [("one key at a time", d) for d in keys.get("slowest_dispatches_step", [])[:5]] + \
               [("typing", d) for d in keys.get("slowest_dispatches_typing", [])[:5]]
        if slow:
            L.append("")
            L.append("The GUI thread's slowest event dispatches (every dispatch is timed; a stall is one or more of them "
                     "back to back, and *CPU ms* below the time means the thread was waiting for a core):")
            L.append("")
            L.append("| phase | ms | CPU ms | dispatch | longest dispatch inside it |")
            L.append("| --- | ---: | ---: | --- | --- |")
            for phase, d in slow:
                inner = f"{d['inner']} ({d['inner_ms']:.2f} ms)" if d.get("inner") else "—"
                L.append(f"| {phase} | {d['ms']:.2f} | {d['cpu_ms']:.2f} | {d['what']} | {inner} |")
        at = keys.get("attribution")
        if at and at.get("shown_view_ms"):
            ar, av = at["run_ms"], at["shown_view_ms"]
            L.append("")
            L.append(f"With the Attribution view on screen (`hs_bench_keys --view attribution`: gradient x input and the "
                     f"components' backward pass, its own job after each run): request to the run's result median "
                     f"{ar['median']:.2f} ms (p90 {ar['p90']:.2f}), to the attribution on the GUI thread median "
                     f"{av['median']:.2f} ms (p90 {av['p90']:.2f}, max {av['max']:.2f}); longest stall one key at a time "
                     f"**{at['stall_step_max_ms']:.1f} ms** ({at['stall_step_over16']} gaps over 16 ms), typing at one key "
                     f"per {at['typing_interval_ms']} ms **{at['stall_typing_max_ms']:.1f} ms** "
                     f"({at['stall_typing_over16']} gaps over 16 ms).")
        ld = keys.get("load")
        if ld and "stall_max_ms" in ld:
            L.append("")
            L.append(f"Loading the {os.path.getsize(os.path.join(ld['load_dir'], 'model.safetensors')) / 2**20:.0f} MiB "
                     f"benchmark model into the window (`hs_bench_keys --load`, as File > Open does, warm page cache): "
                     f"the model was in use after {ld['model_changed_ms']:.0f} ms and its first run on screen after "
                     f"{ld['first_run_ms']:.0f} ms; the GUI thread's longest stall meanwhile was **{ld['stall_max_ms']:.1f} ms** "
                     f"({ld['stalls_over16']} gaps over 16 ms; its own CPU time within a gap at most "
                     f"{ld['stall_max_busy_ms']:.1f} ms). The load runs on a worker thread.")
        elif ld:
            L.append("")
            L.append(f"Loading the benchmark model into the window: not measured ({ld.get('error', 'failed')}).")
    elif keys and "error" in keys:
        L.append(f"Not measured: {keys['error']}")
    else:
        L.append("Not measured: the GUI benchmark (`hs_bench_keys`) is built only with the GUI (`-DHEADSCOPE_GUI=ON`).")
    L.append("")
    if profiles:
        L.append("## Where the forward pass spends its time")
        L.append("")
        L.append("`perf record -e cpu-clock` (a software clock: virtual machines often lack hardware counters) "
                 "around the timed passes of `hs_bench_row` only (not the load or warm-up); self time per function "
                 "in user space unless noted, Eigen's template arguments elided. In Eigen's GEMM the *lhs* is the "
                 "operand it packs in panels: for our row-major products that is the weight matrix, so "
                 "`gemm_pack_lhs` time is time spent copying weights, not multiplying.")
        L.append("")
        for title, prof in profiles:
            L.append(f"**{title}**")
            L.append("")
            L.append("| self % | library | function |")
            L.append("| ---: | --- | --- |")
            for pct, dso, sym in prof:
                L.append(f"| {pct:.1f} | {dso} | `{sym}` |")
            L.append("")
    L.append("## Notes")
    L.append("")
    L.append(NOTES_BEGIN)
    L.append(old_notes.strip("\n") if old_notes else "(Hand-written analysis goes here; kept across re-runs.)")
    L.append(NOTES_END)
    L.append("")
    L.append("## Reproduce")
    L.append("")
    L.append("```sh")
    L.append("tools/bench/run.sh            # everything: about 15 minutes on a quiet 2-core machine")
    L.append("tools/bench/run.sh --quick    # smoke run: a few minutes, rough numbers")
    L.append("```")
    L.append("")
    L.append("The script installs what is missing (libbenchmark-dev, python3-torch, python3-numpy, "
             "libopenblas0-openmp, and HeadScope's own dependencies), builds a Release build with "
             "`-DHEADSCOPE_BENCH=ON` in `build-bench/`, writes the GPT-2-small-shaped model to "
             "`build-bench/gpt2-small/` once (about 500 MB, not committed), runs the rows and rewrites this page. "
             "Single rows by hand:")
    L.append("")
    L.append("```sh")
    L.append("OMP_NUM_THREADS=2 build-bench/tools/bench/hs_bench_row --model build-bench/gpt2-small --tokens 20 --threads 2 --mode cache")
    L.append("OMP_NUM_THREADS=2 /usr/bin/python3 tools/bench/torch_bench.py --model build-bench/gpt2-small --tokens 20 --threads 2 --mode cache")
    L.append("build-bench/tools/bench/hs_bench_row --model build-bench/gpt2-small --mode open --runs 5 [--cold]")
    L.append("OMP_NUM_THREADS=2 build-bench/tools/bench/hs_bench_row --model build-bench/gpt2-small --tokens 16 --threads 2 --mode patch --what resid_pre")
    L.append("OMP_NUM_THREADS=2 /usr/bin/python3 tools/bench/torch_bench.py --model build-bench/gpt2-small --tokens 16 --threads 2 --mode patch --what resid_pre --warmup 0 --runs 1")
    L.append("build-bench/tools/bench/hs_bench_keys          # GUI keystroke latency, headless")
    L.append("```")
    L.append("")
    L.append("Options of `run.sh` (passed to `suite.py`): `--quick`; `--tokens 20,128` (only these rows); "
             "`--no-gui`; `--no-profile`; `--sections rows,patch,grad,atp,families,gemma2,qwen3,units,open,gui,profile` (only these parts; write the page "
             "elsewhere with `--out` then, except for `grad,atp` alone, which rewrite only their own block of the page); `--max-process-seconds S` (a process starts no new pass after S seconds; "
             "default 300, which a quiet machine never reaches); `--json FILE` (every measurement). "
             "`HEADSCOPE_BENCH_BUILD` and `HEADSCOPE_BENCH_MODEL` choose other build and model folders. "
             "The Google Benchmark microbenchmarks of the same calls: "
             "`cmake --build build-bench --target bench_forward`, then "
             "`HEADSCOPE_BENCH_MODEL=build-bench/gpt2-small build-bench/tools/bench/bench_forward`.")
    L.append("")
    return "\n".join(L)


def old_notes_of(path):
    try:
        with open(path, encoding="utf-8") as f:
            t = f.read()
    except OSError:
        return None
    if NOTES_BEGIN in t and NOTES_END in t:
        return t.split(NOTES_BEGIN, 1)[1].split(NOTES_END, 1)[0]
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build-bench"))
    ap.add_argument("--model", required=True)
    ap.add_argument("--family-dir", default=None,
                    help="folder holding the Llama-family shapes (default: the --model folder's parent)")
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "benchmarks.md"))
    ap.add_argument("--quick", action="store_true", help="smoke run: few passes, 1024-token rows single-shot")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)), help="prompt lengths of the rows (default 20,128,1024)")
    ap.add_argument("--no-gui", action="store_true", help="skip the keystroke benchmark")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--max-process-seconds", type=float, default=300,
                    help="a benchmark process starts no new pass after this long; one that has not finished a "
                         "single timed pass by twice this (+2 min) is stopped and shown as such (0: no limit)")
    ap.add_argument("--max-row-seconds", type=float, default=150,
                    help="start no new round of a row after this long (0: always run every round)")
    ap.add_argument("--command", default="tools/bench/run.sh", help="the command to quote on the page")
    ap.add_argument("--json", help="also write every measurement to this JSON file")
    ap.add_argument("--sae", default=None,
                    help="the SAE folder of the units section (default: sae16k beside --model; run.sh writes it)")
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help=f"what to run, comma-separated from {','.join(SECTIONS)} (default: all); with fewer, "
                         "write the page elsewhere (--out) so docs/benchmarks.md keeps a whole run")
    args = ap.parse_args()
    args.model = os.path.abspath(args.model)
    args.family_dir = os.path.abspath(args.family_dir or os.path.dirname(args.model))
    sections = {x for x in args.sections.split(",") if x}
    if sections - set(SECTIONS):
        ap.error(f"--sections: unknown {sorted(sections - set(SECTIONS))}; choose from {','.join(SECTIONS)}")
    # The command quoted on the page: without where the raw JSON went.
    args.command = re.sub(r"\s--json\s+\S+", "", args.command)
    t_start = time.time()
    load_start = loadavg()
    cpu_start = cpu_seconds()
    hs_row = os.path.join(args.build_dir, "tools", "bench", "hs_bench_row")
    hs_keys = os.path.join(args.build_dir, "tools", "bench", "hs_bench_keys")
    cli = os.path.join(args.build_dir, "app", "headscope-cli")
    if not os.access(hs_row, os.X_OK):
        log(f"suite: {hs_row} is missing; build with -DHEADSCOPE_BENCH=ON (tools/bench/run.sh does)")
        return 2
    d_vocab = None
    if sections - ISSUE24_SECTIONS - {"families"}:  # the GPT-2-small-shaped model's sections
        with open(os.path.join(args.model, "config.json")) as f:
            d_vocab = json.load(f)["vocab_size"]

    m = machine(args.build_dir, hs_row)
    log(f"suite: {m['cpu']}, {m['cores']} cores; torch {m['torch']} with {m['torch_blas']}; load {load_start}")
    if "openblas" in m["torch_blas"] and not best_coretype():
        log("suite: WARNING: no AVX2 or AVX-512 in /proc/cpuinfo; OpenBLAS chooses its own kernel for PyTorch")
    if "openblas" not in m["torch_blas"] or "openmp" not in m["torch_blas"]:
        log("suite: WARNING: torch does not load OpenMP OpenBLAS (libopenblas0-openmp); PyTorch is not at its best")

    rows = []
    for mode in (MODES if "rows" in sections else ()):
        for n in [int(x) for x in args.tokens.split(",") if x]:
            ids_arg = ",".join(str(i) for i in bench_tokens(n, d_vocab))
            for t in THREADS:
                rounds, warmup, runs = plan(n, args.quick)
                log(f"suite: {mode:6} {n:5} tokens, {t} thread(s): {rounds} x (HeadScope, PyTorch), "
                    f"{warmup} warm-up + {runs} timed each ...")
                r = run_row(args, hs_row, mode, n, t, ids_arg)
                rows.append(r)
                log(f"suite:        HeadScope {side_ms(r, 'hs')} ms, PyTorch {side_ms(r, 'pt')} ms, "
                    f"HS/PT {fx(r['ratio'])} ({fx(r['speedup'], '.2f', 'x')}); RSS {fx(r['hs_rss_mb'], '.0f')} / "
                    f"{fx(r['pt_rss_mb'], '.0f')} MiB")

    if "rows" in sections:
        # The compute floor of the 20-token row: the cores' sustained multiply-add rate, measured now.
        try:
            m["peak"] = run_json([hs_row, "--model", args.model, "--mode", "peak", "--tokens", "20", "--threads", "2"],
                                 hs_env(2))
            log(f"suite: multiply-add peak {m['peak']['gflops_1']:.1f} GFLOP/s on 1 core, "
                f"{m['peak']['gflops_threads']:.1f} on 2; a 20-token pass is {m['peak']['pass_gflop']:.2f} GFLOP, "
                f"floor {m['peak']['floor_ms_threads']:.1f} ms on 2 threads")
        except RuntimeError as e:
            log(f"suite: peak measurement failed: {e}")

    patch_rows = []
    if "patch" in sections:
        ids_arg = ",".join(str(i) for i in bench_tokens(PATCH_TOKENS, d_vocab))
        for what in PATCH_WHAT[:1] if args.quick else PATCH_WHAT:
            for t in (2,) if args.quick or what != "resid_pre" else (1, 2):
                log(f"suite: patching sweep, {what}, {PATCH_TOKENS} tokens, {t} thread(s) ...")
                r = run_patch_row(args, hs_row, what, t, ids_arg)
                patch_rows.append(r)
                log(f"suite:        HeadScope {side_ms(r, 'hs')} ms (sweep {fmt_ms(r['hs_sweep_ms'])} ms), "
                    f"PyTorch {side_ms(r, 'pt')} ms ({fx(r['speedup'], '.1f', 'x')}); {r['cells']} patched runs")

    grad_rows = []
    if "grad" in sections:
        for t in (2,) if args.quick else THREADS:
            log(f"suite: gradient at every hook, {GRAD_TOKENS} tokens from text, {t} thread(s): HeadScope, "
                f"PyTorch {' and '.join(GRAD_STYLES)} ...")
            r = run_grad_row(args, hs_row, t)
            grad_rows.append(r)
            if r.get("tokens") != GRAD_TOKENS:
                log(f"suite: WARNING: the text is {r.get('tokens')} tokens with this model's tokenizer, not "
                    f"{GRAD_TOKENS} (the benchmark model was written without GPT-2's tokenizer?)")
            log(f"suite:        HeadScope {side_ms(r, 'hs')} ms (forward {fmt_ms(r['fwd_ms'])} ms, ratio "
                f"{fx(r['ratio'], '.2f', 'x')}), PyTorch frozen {side_ms(r, 'frozen')} ms, params "
                f"{side_ms(r, 'params')} ms ({fx(r['speedup'], '.2f', 'x')})")
    atp_rows = []
    if "atp" in sections:
        ids_arg = ",".join(str(i) for i in bench_tokens(PATCH_TOKENS, d_vocab))
        for t in (2,) if args.quick else THREADS:
            log(f"suite: AtP of {','.join(ATP_WHAT)} against the exact sweeps, {PATCH_TOKENS} tokens, {t} thread(s) ...")
            r = run_atp_row(args, hs_row, t, ids_arg)
            atp_rows.append(r)
            log(f"suite:        AtP {fmt_ms(r['atp_ms'])} ms, exact {fmt_ms(r['exact_ms'])} ms "
                f"({fx(r['speedup'], '.1f', 'x')})")

    if "families" in sections or sections & ISSUE24_SECTIONS:
        # The Llama-family yardstick's values, in both its layouts, before its speed is quoted.
        log("suite: checking torch_bench.py's Llama family against tools/reference (check_torch_bench.py) ...")
        check = subprocess.run([PYTHON, os.path.join(HERE, "check_torch_bench.py")], env=torch_env(1),
                               capture_output=True, text=True)
        for line in check.stdout.splitlines():
            log(f"suite:        {line}")
        if check.returncode != 0:
            raise SystemExit("suite: torch_bench.py's Llama family disagrees with the float64 reference "
                             f"(check_torch_bench.py exit {check.returncode}): its speed would not be a yardstick\n"
                             + check.stderr[-2000:])
    families = run_family_rows(args, hs_row) if "families" in sections else []
    issue24 = [run_issue24_section(args, hs_row, sec) for sec in ("qwen3", "gemma2") if sec in sections]
    units = run_units_section(args, hs_keys, cli) if "units" in sections else None

    open_warm = open_cold = None
    if "open" in sections:
        log("suite: opening the model (warm, then cold) ...")
        open_warm = run_json([hs_row, "--model", args.model, "--mode", "open", "--warmup", "1",
                              "--runs", "3" if args.quick else "7"], hs_env(2))
        try:
            open_cold = run_json([hs_row, "--model", args.model, "--mode", "open", "--cold", "--warmup", "0",
                                  "--runs", "1" if args.quick else "3"], hs_env(2))
        except RuntimeError as e:
            log(f"suite: cold open failed: {e}")
            open_cold = None
        open_warm["reopen"] = reopen(hs_row, args.model, 3 if args.quick else 7)
        log(f"suite:        warm {fmt_ms(open_warm['median_ms'])} ms, cold {fmt_ms(open_cold['median_ms']) if open_cold else '—'} ms, "
            f"again from the pack cache {fmt_ms(open_warm['reopen']['median_ms'])} ms")

    keys = None
    if os.access(hs_keys, os.X_OK) and not args.no_gui and "gui" in sections:
        log("suite: typing into the GUI (hs_bench_keys, offscreen) ...")
        env = dict(os.environ)
        env.setdefault("QT_QPA_PLATFORM", "offscreen")
        env["OMP_NUM_THREADS"] = str(os.cpu_count() or 1)
        try:
            keys = run_json([hs_keys], env, timeout=600)
            log(f"suite:        keystroke to views' data: median {keys['views_ms']['median']:.2f} ms; "
                f"longest stall {keys['stall_max_ms']:.1f} ms ({keys['model_kind']})")
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            log(f"suite: hs_bench_keys failed: {e}")
            keys = {"error": str(e).splitlines()[0]}
        if "views_ms" in keys:
            log("suite: typing with the Attribution view on screen (hs_bench_keys --view attribution) ...")
            try:
                keys["attribution"] = run_json([hs_keys, "--view", "attribution"], env, timeout=600)
                log(f"suite:        run median {keys['attribution']['run_ms']['median']:.2f} ms, attribution "
                    f"{keys['attribution']['shown_view_ms']['median']:.2f} ms; longest stall "
                    f"{keys['attribution']['stall_max_ms']:.1f} ms")
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                log(f"suite: hs_bench_keys --view attribution failed: {e}")
            log("suite: typing into a 1000-token prompt (hs_bench_keys --long 1000) ...")
            try:
                # 300 keys: enough for the resident set's slope after the first keys (issue 21).
                keys["long"] = run_json([hs_keys, "--model", args.model, "--long", "1000", "--long-keys",
                                         "24" if args.quick else "300", "--middle-keys", "6"], env, timeout=1200)
                log(f"suite:        at the end: run median {keys['long']['end']['run_ms']['median']:.1f} ms, views "
                    f"{keys['long']['end']['views_ms']['median']:.1f} ms")
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                log(f"suite: hs_bench_keys --long failed: {e}")
            log("suite: loading the benchmark model into the GUI (hs_bench_keys --load) ...")
            try:
                run_json([hs_row, "--model", args.model, "--mode", "open", "--warmup", "0", "--runs", "1"], hs_env(2))
                keys["load"] = run_json([hs_keys, "--load", args.model], env, timeout=600)
                log(f"suite:        in use after {keys['load']['model_changed_ms']:.0f} ms; longest GUI stall "
                    f"{keys['load']['stall_max_ms']:.1f} ms")
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                log(f"suite: hs_bench_keys --load failed: {e}")
                keys["load"] = {"error": str(e).splitlines()[0]}

    profiles = []
    if not args.no_profile and "profile" in sections and perf_works():
        log("suite: profiling with perf (timed passes only) ...")
        jobs = [("cache", 20, 1, 2, 10 if args.quick else 30, "forward pass, 20 tokens, full cache, 1 thread", True),
                ("cache", 20, 2, 2, 10 if args.quick else 30,
                 "forward pass, 20 tokens, full cache, 2 threads (both threads' samples: time a thread waits for "
                 "the other shows as the OpenMP runtime)", True),
                ("cache", 1024, 1, 0, 1, "forward pass, 1024 tokens, full cache, 1 thread", True),
                ("open", 0, 2, 1, 3, "opening the model (warm page cache, 2 threads; kernel time included)", False)]
        if args.quick:
            jobs = [j for j in jobs if j[1] != 1024]
        for mode, n, t, warmup, runs, title, user_only in jobs:
            ids_arg = ",".join(str(i) for i in bench_tokens(n, d_vocab)) if n else None
            prof = profile(hs_row, args.model, mode, n, t, warmup, runs, ids_arg, user_only)
            if prof:
                profiles.append((title, prof))

    load_end = loadavg()
    cpu_end = cpu_seconds()
    elapsed = time.time() - t_start
    m["others_cores"] = max(0.0, ((cpu_end[0] - cpu_start[0]) - (cpu_end[1] - cpu_start[1])) / max(elapsed, 1e-9))
    print(console_table(rows))
    if keys and "views_ms" in keys:
        print(f"keystroke -> views' data: median {keys['views_ms']['median']:.2f} ms (after {keys['debounce_setting_ms']} ms "
              f"debounce); longest GUI stall {keys['stall_max_ms']:.1f} ms [{keys['model_kind']}]")
    if open_warm:
        print(f"open model: warm {fmt_ms(open_warm['median_ms'])} ms; cold {fmt_ms(open_cold['median_ms']) if open_cold else '—'} ms")
    # The other sections' targets only when one of them ran (a gradients-only run measures none).
    shown = (targets(rows, open_warm, open_cold, keys, m.get("peak")) if sections - BLOCK_SECTIONS
             else []) + (patch_targets(patch_rows) if patch_rows else []) + grad_targets(grad_rows, atp_rows) + \
        issue24_targets(issue24) + units_targets(units)
    for t, measured, ok, note in shown:
        print(f"[{'MET' if ok else ('--' if ok is None else 'NOT MET')}] {t}: {measured}")

    if sections <= BLOCK_SECTIONS and os.path.isfile(args.out):
        # Sections with a block of their own, alone: only their blocks of the existing page are rewritten.
        with open(args.out, encoding="utf-8") as f:
            text = f.read()
        others = m.get("others_cores", 0.0)
        note = (f"Measured {datetime.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')} with `{args.command}` "
                f"alone (HeadScope at commit {m['commit']}; {elapsed / 60:.1f} minutes; other processes used "
                f"{others:.2f} of the {m['cores']} cores on average"
                + (": **draft numbers, measured under load**" if others > 0.1 * (m["cores"] or 1) else "")
                + (": **a `--quick` smoke run**" if args.quick else "") + ").")
        if sections & GRAD_SECTIONS:
            text = replace_grad_block(text, "\n".join(grad_markdown(grad_rows, atp_rows, note)))
        if sections & ISSUE24_SECTIONS:
            text = replace_grad_block(text, "\n".join(issue24_markdown(issue24, note)), ISSUE24_BEGIN, ISSUE24_END)
        if sections & UNITS_SECTIONS:
            text = replace_grad_block(text, "\n".join(units_markdown(units, note)), ISSUE25_BEGIN, ISSUE25_END)
    else:
        text = markdown(args, m, rows, open_warm, open_cold, keys, profiles, load_start, load_end, elapsed,
                        old_notes_of(args.out), patch_rows, families, grad_rows, atp_rows, issue24, units)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": m, "rows": rows, "patch_rows": patch_rows, "grad_rows": grad_rows,
                       "atp_rows": atp_rows, "families": families, "issue24": issue24, "units": units,
                       "open_warm": open_warm,
                       "open_cold": open_cold, "keys": keys,
                       "profiles": profiles, "load": [load_start, load_end]}, f, indent=1)
    log(f"suite: wrote {os.path.relpath(args.out, REPO)} ({elapsed / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
