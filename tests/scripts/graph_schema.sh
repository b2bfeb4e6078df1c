#!/usr/bin/env bash
# headscope-cli graph's JSON against Neuronpedia's published graph schema
# (tests/fixtures/graph/graph-schema.json), with Debian's python3-jsonschema: the built-in model's
# graph of a repeated sentence, and one with --max-feature-nodes. Exits 77 (skip) without the
# validator. Usage: graph_schema.sh HEADSCOPE_CLI SOURCE_DIR WORK_DIR
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
/usr/bin/python3 - "$src/tests/fixtures/graph/graph-schema.json" "$work/a.json" "$work/b.json" <<'PY'
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
    print(f"{path}: valid, {len(graph['nodes'])} nodes, {len(graph['links'])} links")
PY
