#!/usr/bin/env bash
# `headscope-cli scan` as four shards run side by side by GNU parallel (as a scheduler would run
# them: docs/scan.md), merged, against one process over the same file: every mean and standard
# deviation to 1e-6 relative, every count and bad-line report equal. Skips (exit 77) without
# GNU parallel (tools/dev/deps.sh --with-test-tools installs it) or python3.
set -euo pipefail
cli=$1
work=$2
for tool in parallel python3; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool is not installed (tools/dev/deps.sh --with-test-tools installs it)"
    exit 77
  fi
done
rm -rf "$work"
mkdir -p "$work"
input=$work/prompts.txt
# Prose with repeats (so every score exists on some prompts), an empty line and a line of invalid
# UTF-8 (bad lines, counted by whichever shard reads them).
{
  for i in 1 2 3 4 5; do
    printf 'The cat sat on the mat, and the cat slept number %s.\n' "$i"
    printf 'Tom and Lily went to the shop. Tom bought an apple and Lily bought %s apples.\n' "$i"
    printf 'She saw a big dog. The big dog saw her too, %s times.\n' "$i"
    printf 'Once upon a time there was a girl who liked the number %s.\n' "$i"
  done
  printf '\n\xff\xfe not text\n'
} >"$input"

# The engine's threads would fight each other: one each, as on a cluster's one-core tasks.
"$cli" scan --input "$input" --threads 1 -o "$work/one.json" 2>/dev/null
parallel -j4 "'$cli' scan --input '$input' --threads 1 --shard {}/4 -o '$work/shard{}.json' 2>/dev/null" ::: 0 1 2 3
"$cli" merge -o "$work/merged.json" "$work"/shard{0,1,2,3}.json

python3 - "$work/one.json" "$work/merged.json" <<'PY'
import json, math, sys
one, merged = (json.load(open(p)) for p in sys.argv[1:3])
assert one["counts"] == merged["counts"], (one["counts"], merged["counts"])
assert one["bad_lines"] == merged["bad_lines"], (one["bad_lines"], merged["bad_lines"])
assert one["counts"]["prompts"] == 20 and one["counts"]["bad_lines"] == 2, one["counts"]
worst = 0.0
def walk(a, b, path):
    global worst
    if isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            walk(x, y, f"{path}[{i}]")
    elif a is None or b is None:
        assert a is None and b is None, path
    else:
        rel = abs(a - b) / max(abs(a), abs(b), 1e-12)
        worst = max(worst, rel)
        assert rel <= 1e-6 or abs(a - b) <= 1e-12, f"{path}: {a} vs {b}"
for name, agg in one["aggregates"].items():
    assert agg["count"] == merged["aggregates"][name]["count"], name
    for part in ("mean", "std"):
        walk(agg[part], merged["aggregates"][name][part], f"{name}.{part}")
print(f"4 shards merged equal one process: {one['counts']['prompts']} prompts, max relative difference {worst:.3g}")
PY
