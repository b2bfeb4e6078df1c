#!/bin/sh
# Remakes every number quoted in docs/graph-example.md: the built-in model's attribution graph,
# routes and QK tracing on a repeated sentence. Usage: tools/examples/graph_example.sh [BUILD_DIR]
set -e
cd "$(dirname "$0")/../.."
CLI=${1:-build}/app/headscope-cli
OUT=${OUT:-/tmp/hs-graph-example}
mkdir -p "$OUT"
T="The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat sat on the"
"$CLI" graph --text "$T" -o "$OUT/graph.json" --raw "$OUT/raw.npz"
"$CLI" routes --text "$T" -o "$OUT/routes.json"
/usr/bin/python3 tools/examples/graph_example.py "$OUT" "$CLI" "$T"
"$CLI" qk --text "$T" --head 3.2 --query 33 --key 16 --top 10 -o "$OUT/qk.json"
/usr/bin/python3 - "$OUT/qk.json" <<'PY'
import json, sys
q = json.load(open(sys.argv[1]))
print("QK L%d.H%d query %d key %d: score %.3f, remainder after the listed pairs %.3f" % (q["layer"], q["head"], q["query_pos"], q["key_pos"], q["score"], q["remainder"]))
for p in q["pairs"][:6]:
    print("  %-14s x %-14s %+.3f" % (p["query_label"], p["key_label"], p["term"]))
ks = sorted(q["key_components"], key=lambda c: -abs(c["marginal"]))[:6]
print("largest key-side parts:", ", ".join("%s %+.3f" % (c["label"], c["marginal"]) for c in ks))
PY
