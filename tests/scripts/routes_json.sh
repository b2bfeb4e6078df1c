#!/usr/bin/env bash
# headscope-cli routes writes JSON as docs/graph.md ("Routes JSON") describes it: the built-in
# model's routes of a repeated sentence at the default threshold and at another position and
# threshold and on tokens that are single bytes of characters, each file read back with python3's json and its invariants checked (ids unique, edges
# between listed nodes, kept shares over the threshold summing to 1 into each residual state, the
# routes' edges leading to their start), and a bad threshold refused with no file left.
# Usage: routes_json.sh HEADSCOPE_CLI WORK_DIR
set -euo pipefail
cli=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
"$cli" routes --text "The dog ran. The dog" -o "$work/a.json"
"$cli" routes --tokens 4095,260,3625,2855,13,260,3625 --threshold 0.1 --position 3 -o "$work/b.json"
# Single bytes of multi-byte characters (ids 122, 159): their labels must still make valid JSON.
"$cli" routes --tokens 4095,122,159,160,122 -o "$work/d.json"
if "$cli" routes --text "The dog" --threshold 1.5 -o "$work/c.json" 2>"$work/c.err"; then
  echo "a threshold of 1.5 was accepted"; exit 1
fi
grep -q "threshold is a share of a residual stream, between 0 and 1" "$work/c.err"
test ! -e "$work/c.json"
/usr/bin/python3 - "$work/a.json" "$work/b.json" "$work/d.json" <<'PY'
import json, sys
for path, threshold, position in ((sys.argv[1], 0.04, None), (sys.argv[2], 0.1, 3), (sys.argv[3], 0.04, None)):
    g = json.load(open(path))
    m = g["metadata"]
    assert m["schema"] == "headscope-routes" and m["schema_version"] == 1
    n, L = len(m["token_ids"]), m["n_layers"]
    assert len(m["prompt_tokens"]) == n and m["threshold"] == threshold
    assert m["position"] == (n - 1 if position is None else position)
    ids = [v["id"] for v in g["nodes"]]
    assert len(set(ids)) == len(ids) == n * (1 + 3 * L), "node ids"
    kinds = {v["id"]: v["kind"] for v in g["nodes"]}
    into = {}
    for e in g["edges"]:
        assert e["source"] in kinds and e["target"] in kinds, "an edge leaves the nodes"
        assert e["weight"] > threshold and e["kind"] in ("attention", "residual", "mlp")
        assert ("head" in e) == (e["kind"] == "attention")
        into[e["target"]] = into.get(e["target"], 0.0) + e["weight"]
    for i, k in kinds.items():
        if k in ("after_attn", "after_ffn"):
            assert abs(into.get(i, 0.0) - 1.0) < 1e-5, (i, into.get(i))
    r = g["routes"]
    assert r["start"] == f"I{L - 1}_{m['position']}"
    route = [g["edges"][i] for i in r["edges"]]
    assert route, "no routes"
    sources = {e["source"] for e in route}
    assert all(e["target"] == r["start"] or e["target"] in sources for e in route)
    assert any(e["target"] == r["start"] for e in route)
    print(f"{path}: valid, {len(ids)} nodes, {len(g['edges'])} edges, {len(route)} on the routes from {r['start']}")
PY
