"""Prints the numbers of docs/graph-example.md from the JSON the CLI wrote (see graph_example.sh)."""
import json, subprocess, sys
out, cli, text = sys.argv[1:4]
g = json.load(open(f"{out}/graph.json"))
toks = g["metadata"]["prompt_tokens"]
last = len(toks) - 1
print("tokens:", len(toks), "last:", repr(toks[last]))
for n in g["nodes"]:
    if n.get("is_target_logit"):
        print("logit", n["node_id"], repr(n.get("clerp", "")), "p=%.3f" % n["token_prob"])
feats = sorted((n for n in g["nodes"] if n["feature_type"] == "cross layer transcoder"),
               key=lambda n: -n["influence"] if n.get("influence") is not None else 0)
print("kept nodes:", len(g["nodes"]), "links:", len(g["links"]))
r = json.load(open(f"{out}/routes.json"))
edges = [r["edges"][i] for i in r["routes"]["edges"]]
att = sorted((e for e in edges if e["kind"] == "attention"), key=lambda e: -e["weight"])
print("attention edges on the routes from", r["routes"]["start"])
for e in att[:12]:
    print("  L%d.H%d %s -> %s share %.3f" % (e["layer"], e["head"], e["source"], e["target"], e["weight"]))
