#!/usr/bin/env bash
# headscope-cli qk writes JSON that parses and adds up: on the built-in model with its own
# transcoders and with --neurons, the listed pairs plus the remainder equal the run's score, each
# side's marginals sum to the same total, and a key after the query is refused with its message.
# Usage: qk_json.sh HEADSCOPE_CLI WORK_DIR
set -euo pipefail
cli=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
"$cli" qk --text "The dog ran. The dog" --head 3.5 --query 6 --key 3 --top 20 -o "$work/features.json"
"$cli" qk --text "The dog ran. The dog" --head L1H4 --query 6 --key 5 --neurons --top 5 -o "$work/neurons.json"
if "$cli" qk --text "The dog ran. The dog" --head 1.4 --query 2 --key 5 -o "$work/bad.json" 2>"$work/bad.txt"; then
  echo "a key after the query was not refused"; exit 1
fi
grep -q "key position 5 is after query position 2" "$work/bad.txt"
test ! -e "$work/bad.json"
/usr/bin/python3 - "$work/features.json" "$work/neurons.json" <<'PY'
import json, sys
for path, top, units in ((sys.argv[1], 20, "transcoder features"), (sys.argv[2], 5, "mlp neurons")):
    j = json.load(open(path))
    assert j["units"] == units, j["units"]
    assert len(j["pairs"]) == top
    listed = sum(p["term"] for p in j["pairs"])
    scale = max(1.0, abs(j["score"]))
    assert abs(listed + j["remainder"] - j["score_before_softcap"]) < 1e-5 * scale, (listed, j["remainder"])
    assert abs(j["score"] - j["score_before_softcap"]) < 1e-5 * scale
    for side in ("query_components", "key_components"):
        assert abs(sum(c["marginal"] for c in j[side]) - j["total"]) < 1e-5 * scale, side
    assert all(abs(a["term"]) >= abs(b["term"]) for a, b in zip(j["pairs"], j["pairs"][1:]))
    for p in j["pairs"]:
        assert p["query_label"] == j["query_components"][p["query"]]["label"]
        assert p["key_label"] == j["key_components"][p["key"]]["label"]
    kinds = {c["kind"] for c in j["query_components"]}
    assert {"embed", "pos_embed", "head", "constant"} <= kinds, kinds
    assert ("feature" in kinds and "error" in kinds) if units.startswith("transcoder") else "neuron" in kinds, kinds
    print(f"{path}: {len(j['query_components'])} x {len(j['key_components'])} components, score {j['score']:.6g}, "
          f"top pair {j['pairs'][0]['query_label']} x {j['pairs'][0]['key_label']} = {j['pairs'][0]['term']:.4g}")
PY
