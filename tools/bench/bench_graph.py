"""Issue 26's graph benchmarks on the built-in model with its own transcoders, through headscope-cli:
the 32-token graph (build and pruning at 0.8 / 0.98, medians after a warm-up; target at most 1 s on
2 threads) and, with --long, the peak RSS of the longest prompt the model takes (256 positions) and
of a 1,000-token prompt on the same model with a longer position table, with the load average
beside each measurement.

    /usr/bin/python3 tools/bench/bench_graph.py [BUILD_DIR] [--runs 5] [--long [LONG_MODEL]] [--gpt2 MODEL TRANSCODERS]

--long LONG_MODEL: make_long_builtin.py LONG_MODEL writes it (the built-in model and its transcoders
with 1,024 positions: the issue's 1,000 tokens exceed the built-in model's 256).

--gpt2: the GPT-2-small-shaped graph (target at most 30 s at 32 tokens, 2 threads), one run after no
warm-up: make_gpt2_small.py MODEL and make_bench_transcoders.py TRANSCODERS write its inputs.

Each 32-token and --gpt2 case also runs the PyTorch yardstick (torch_graph.py: circuit-tracer's
attribution phase in float32) on the same model, transcoders and token ids, in its own process with
the same threads, at batch 64 (HeadScope's --batch) and 512 (circuit-tracer's default), and prints
the ratio of the faster to HeadScope. The yardstick times only its rows (the backward passes);
HeadScope's "built in" also encodes the transcoders and assembles the graph, so the ratio is in
the yardstick's favour. The header shows the BLAS torch loaded and torch.__config__.show().

Not yet a section of suite.py (docs/benchmarks.md does not show it yet)."""
import json, os, re, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from openblas_env import best_env  # noqa: E402

args = sys.argv[1:]
build = args[0] if args and not args[0].startswith("--") else "build"
runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 5
cli = os.path.join(build, "app", "headscope-cli")
env = dict(os.environ, OMP_NUM_THREADS="2")
# A repeated sentence, as token ids of the built-in model's tokenizer (BOS first), so the length is exact.
SENT = [276, 291, 1124, 326, 260, 270, 291, 13, 388]            # " cat sat on the mat. The" (repeats)


def prompt(n):
    ids = [4095, 340]
    while len(ids) < n:
        ids += SENT
    return ids[:n]


def graph(n, extra=(), ids=None):
    """(build ms, prune ms, nodes, kept nodes, active features, peak RSS KB of this run, load average)."""
    load = os.getloadavg()[0]
    with tempfile.TemporaryFile("w+") as log:
        child = subprocess.Popen([cli, "graph", "--no-bos", "--tokens", ",".join(map(str, ids or prompt(n))), *extra,
                                  "-o", "/tmp/hs-bench-graph.json"], env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)  # this run's own peak, not the largest child's so far
        child.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        out = log.read()
    if child.returncode != 0:
        sys.exit(f"headscope-cli graph failed ({child.returncode}):\n{out}")
    m = re.search(r"(\d+) active features.*?(\d+) of (\d+) nodes.*built in (\d+) ms, pruned in (\d+) ms", out)
    return int(m[4]), int(m[5]), int(m[3]), int(m[2]), int(m[1]), usage.ru_maxrss, load


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILTIN = os.path.join(REPO, "resources", "models", "headscope-tiny")
# OpenBLAS's best kernel for this CPU for torch (openblas_env.py, as suite.py).
torch_env = best_env(env)


def torch_rows(ids, model=BUILTIN, transcoders=os.path.join(BUILTIN, "saes"), batch=64, show_config=False):
    """(rows, ms) of torch_graph.py on the same inputs with HeadScope's threads and --max-feature-nodes
    default; with show_config, prints torch's build configuration and the BLAS it loaded."""
    out = subprocess.run([sys.executable, os.path.join(REPO, "tools", "bench", "torch_graph.py"), "--model", model,
                          "--transcoders", transcoders, "--tokens", ",".join(map(str, ids)), "--threads", "2",
                          "--batch", str(batch), *(["--show-config"] if show_config else [])],
                         env=torch_env, capture_output=True, text=True, check=True).stdout
    m = re.search(r"torch graph rows: (\d+) rows in (\d+) ms \((\d+) threads", out)
    if show_config:
        print("PyTorch yardstick: " + out[out.index("PyTorch built with"):].strip().replace("\n", "\n  "))
        if "openblas-openmp" not in out or m[3] != "2":
            print("WARNING: torch is not on OpenMP OpenBLAS with 2 threads; the yardstick is not at its best")
    return int(m[1]), int(m[2])


def versus_torch(what, ids, hs_ms, **kw):
    """Runs the yardstick at both batch sizes and prints the faster's ratio to HeadScope's build."""
    t = {b: torch_rows(ids, batch=b, **kw) for b in (64, 512)}
    best = min(t, key=lambda b: t[b][1])
    print(f"  PyTorch yardstick, {what}: {t[64][0]} rows in {t[64][1]} ms (batch 64), {t[512][1]} ms (batch 512); "
          f"torch rows / HeadScope build = {t[best][1] / hs_ms:.1f}x (batch {best}; HeadScope's build also encodes "
          f"the transcoders); load {os.getloadavg()[0]:.2f}")


torch_rows(prompt(32), show_config=True)  # the header (and a warm-up of the files)
graph(32)  # warm-up
r = [graph(32) for _ in range(runs)]
b, p = statistics.median(x[0] for x in r), statistics.median(x[1] for x in r)
print(f"graph 32 tokens, 2 threads, {runs} runs: build {b:.0f} ms, prune {p:.0f} ms, total {b + p:.0f} ms "
      f"(target 1000 ms: {'met' if b + p <= 1000 else 'NOT met'}); {r[0][4]} active features, {r[0][2]} nodes, "
      f"{r[0][3]} kept; load {min(x[6] for x in r):.2f}-{max(x[6] for x in r):.2f}")
versus_torch("32 tokens", prompt(32), b)
if "--long" in args:
    # The built-in model's whole context, with the default bound on rows and with every feature a row.
    for extra, what in (((), "default bound"), (("--max-feature-nodes", "0"), "every feature a row")):
        bl, pl, nodes, kept, feats, rss, load = graph(256, extra)
        print(f"graph 256 tokens, {what}: build {bl} ms, prune {pl} ms; {feats} active features, {nodes} nodes, "
              f"adjacency {nodes * nodes * 4 / 2**30:.2f} GiB; peak RSS {rss / 2**20:.2f} GiB; load {load:.2f}")
    # 1,000 tokens of the model's held-out text on the built-in model with 1,024 positions
    # (make_long_builtin.py LONG_MODEL writes it): the target is under 4 GB (decimal).
    i = args.index("--long")
    long_model = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None
    if long_model:
        text = ""
        with open(os.path.join(REPO, "resources", "models", "headscope-tiny", "heldout.jsonl"), encoding="utf-8") as f:
            for line in f:
                text += json.loads(line)["text"] + "\n\n"
                if len(text) > 8000:
                    break
        tok = subprocess.run([cli, "tokenize", "--model", long_model, "--text", text], capture_output=True, text=True,
                             check=True)
        ids = [4095] + json.loads(tok.stdout)["ids"][:999]
        bl, pl, nodes, kept, feats, rss, load = graph(1000, ["--model", long_model], ids)
        limit = 4e9
        print(f"graph 1000 tokens (built-in model, 1,024 positions): build {bl / 1000:.1f} s, prune {pl / 1000:.1f} s; "
              f"{feats} active features, {nodes} nodes ({kept} kept); peak RSS {rss * 1024 / 1e9:.2f} GB "
              f"({rss / 2**20:.2f} GiB; target under 4 GB: {'met' if rss * 1024 < limit else 'NOT met'}); load {load:.2f}")
        print(f"  every feature a row would be a dense adjacency of ~{(feats + 5 * 1000) ** 2 * 4 / 1e9:.0f} GB")
if "--gpt2" in args:
    i = args.index("--gpt2")
    ids = [100 + 37 * k for k in range(32)]  # any 32 ids: the weights are random
    bl, pl, nodes, kept, feats, rss, load = graph(32, ["--model", args[i + 1], "--transcoders", args[i + 2]], ids)
    print(f"gpt2-small-shaped graph 32 tokens: build {bl} ms, prune {pl} ms, total {bl + pl} ms (target 30000 ms: "
          f"{'met' if bl + pl <= 30000 else 'NOT met'}); {feats} active features ({feats / 32 / 12:.0f} per layer and "
          f"position), {nodes} nodes, {kept} kept; peak RSS {rss / 2**20:.2f} GiB; load {load:.2f}")
    versus_torch("gpt2-small-shaped 32 tokens", ids, bl, model=args[i + 1], transcoders=args[i + 2])
