#!/bin/sh
# Retrain HeadScope's built-in model from scratch, end to end (fixed seeds):
#   Debian packages -> corpus -> BPE tokenizer -> training -> F16 export -> model card + fixture.
# Usage: tools/train/retrain.sh [WORK_DIR]   (default /tmp/headscope-train; needs apt-get download,
# Debian's python3-torch, python3-numpy and python3-matplotlib; about 90 minutes on a quiet 2-core machine; at most 86 + 38 by the time limits)
# The scratch folder holds the downloaded packages, the corpus, the token ids and the checkpoints;
# rerunning after a crash resumes training from the last checkpoint.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
WORK=${1:-${HEADSCOPE_TRAIN_WORK:-/tmp/headscope-train}}
PY=/usr/bin/python3
OUT="$ROOT/resources/models/headscope-tiny"
# OpenMP threads that spin while the other core is busy (compilers...) slow training 10x or more.
export OMP_WAIT_POLICY=PASSIVE

$PY "$HERE/prepare_data.py" --work "$WORK"
if [ ! -f "$WORK/tokenizer/merges.txt" ]; then
    $PY "$HERE/bpe.py" train --corpus "$WORK/corpus/train.txt" --vocab-size 4096 --out "$WORK/tokenizer"
fi
# Stage 1: language (50% plain text, 30% random spans repeated 2-3 times, 20% repeated text).
if [ ! -f "$WORK/run/final.pt" ]; then
    $PY "$HERE/train.py" --work "$WORK" --tok "$WORK/tokenizer"
fi
# Stage 2: from stage 1's weights, 40% random-repeat sequences, half of them one short span
# repeated until full (copying from context pays at once there); this is where the induction
# heads form (stage 1 alone, 10.6M tokens, had previous-token heads but no induction head).
if [ ! -f "$WORK/run2/final.pt" ]; then
    $PY "$HERE/train.py" --work "$WORK" --tok "$WORK/tokenizer" --init "$WORK/run/final.pt" --run-name run2 \
        --tokens 6e6 --lr 1e-3 --warmup 100 --hold 0.7 --p-rand 0.4 --p-short 0.5 --p-nat-rep 0.2 --minutes 38 \
        --probe-every 100
fi
$PY "$HERE/export.py" --ckpt "$WORK/run2/final.pt" --tok "$WORK/tokenizer" --out "$OUT"
$PY "$HERE/make_card.py" --model "$OUT" --work "$WORK"
# The held-out passages the app builds the units' dashboards from (heldout.jsonl).
$PY "$HERE/make_dashboard_text.py" --work "$WORK" --out "$OUT/heldout.jsonl"
$PY "$HERE/make_builtin_fixture.py" --model "$OUT" --out "$ROOT/tests/fixtures/builtin"
$PY "$HERE/head_scores.py" --model "$OUT"
