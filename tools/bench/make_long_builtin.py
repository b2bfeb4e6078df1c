"""Writes the built-in model with a position table of 1,024 rows, for issue 26's long-prompt graph
benchmark (bench_graph.py --long): the built-in model has 256 positions, and the issue's graph is of
a 1,000-token prompt.

    /usr/bin/python3 tools/bench/make_long_builtin.py OUT [--positions 1024]

Every weight and every transcoder (saes/) is the built-in model's own; only `wpe` grows. Rows from
256 on repeat the table's second half (row p is row 128 + (p - 128) % 128), so each position past
the trained ones carries a position vector the model has seen, and nearby positions still differ.
The model was never trained past 256 positions: its predictions there are not the built-in model's
(which has none), but its activations are of the same kind, so the graph's size, the number of its
active features and its memory are those of a model of this shape. Benchmarks only."""
import argparse
import json
import os
import shutil
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools", "reference"))
import hsref  # noqa: E402

BUILTIN = os.path.join(REPO, "resources", "models", "headscope-tiny")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="output folder (created)")
    parser.add_argument("--positions", type=int, default=1024)
    args = parser.parse_args()
    with open(os.path.join(BUILTIN, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    trained = config["n_positions"]
    if args.positions <= trained:
        parser.error(f"--positions must exceed the built-in model's {trained}")
    os.makedirs(args.out, exist_ok=True)
    tensors, dtypes, metadata = hsref.read_safetensors(os.path.join(BUILTIN, "model.safetensors"), with_dtypes=True)
    key = next(k for k in tensors if k.endswith("wpe.weight"))
    wpe = tensors[key]
    half = trained // 2
    rows = [wpe[p] if p < trained else wpe[half + (p - half) % half] for p in range(args.positions)]
    tensors[key] = np.stack(rows).astype(wpe.dtype)
    hsref.write_safetensors(os.path.join(args.out, "model.safetensors"), tensors, dtypes=dtypes, metadata=metadata)
    config["n_positions"] = config["n_ctx"] = args.positions
    with open(os.path.join(args.out, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    for name in ("vocab.json", "merges.txt"):
        shutil.copyfile(os.path.join(BUILTIN, name), os.path.join(args.out, name))
    shutil.copytree(os.path.join(BUILTIN, "saes"), os.path.join(args.out, "saes"), dirs_exist_ok=True)
    print(f"wrote {args.out}: the built-in model with {args.positions} positions (trained: {trained}) and its saes/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
