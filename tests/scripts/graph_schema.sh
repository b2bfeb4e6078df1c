#!/usr/bin/env bash
# headscope-cli graph's JSON against Neuronpedia's published graph schema
# (tests/fixtures/graph/graph-schema.json), with Debian's python3-jsonschema: the built-in model's
# graph of a repeated sentence, one with --max-feature-nodes, and two with --neurons. Exits 77
# (skip) without the validator. Usage: graph_schema.sh HEADSCOPE_CLI SOURCE_DIR WORK_DIR
set -euo pipefail
cli=$1 src=$2 work=$3
if ! /usr/bin/python3 -c "import jsonschema" 2>/dev/null; then
  echo "skipped: python3-jsonschema is not installed (tools/dev/deps.sh --with-test-tools installs it)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
"$cli" graph --text "The dog ran. The dog" -o "$work/a.json" --raw "$work/a.npz"
"$cli" graph --text "When Mary and John went to the store, John gave a drink to" --max-feature-nodes 50 \
  --node-threshold 0.6 -o "$work/b.json"
# MLP neurons as nodes (--neurons), with the default limit and with a small one; and --neurons
# with --transcoders is refused.
"$cli" graph --neurons --text "The dog ran. The dog" -o "$work/c.json" --raw "$work/c.npz"
"$cli" graph --neurons --max-feature-nodes 100 --text "When Mary and John went to the store, John gave a drink to" \
  -o "$work/d.json"
if "$cli" graph --neurons --transcoders "$work" --text "The dog" -o "$work/e.json" 2>"$work/e.err"; then
  echo "graph --neurons --transcoders was accepted"; exit 1
fi
grep -q "not both" "$work/e.err"
/usr/bin/python3 - "$src/tests/fixtures/graph/graph-schema.json" "$work/a.json" "$work/b.json" "$work/c.json" "$work/d.json" <<'PY'
import json, sys
import jsonschema
schema = json.load(open(sys.argv[1]))
for path in sys.argv[2:]:
    graph = json.load(open(path))
    jsonschema.validate(graph, schema)
    ids = {n["node_id"] for n in graph["nodes"]}
    assert len(ids) == len(graph["nodes"]), "node ids repeat"
    assert all(l["source"] in ids and l["target"] in ids for l in graph["links"]), "a link leaves the nodes"
    assert any(n["feature_type"] == "logit" and n["is_target_logit"] for n in graph["nodes"])
    types = {n["feature_type"] for n in graph["nodes"]}
    if path.endswith(("c.json", "d.json")):  # neuron graphs: neuron nodes, no error nodes
        assert "mlp neuron" in types and "mlp reconstruction error" not in types and "cross layer transcoder" not in types, types
    print(f"{path}: valid, {len(graph['nodes'])} nodes, {len(graph['links'])} links")
PY
