#!/bin/sh
# Retrain HeadScope's built-in model from scratch, end to end (fixed seeds):
#   Debian packages -> corpus -> BPE tokenizer -> training -> F16 export -> model card + fixture.
# Usage: tools/train/retrain.sh [WORK_DIR]   (default /tmp/headscope-train; needs apt-get download,
# Debian's python3-torch, python3-numpy and python3-matplotlib; about 90 minutes on 2 cores)
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
if [ ! -f "$WORK/run/final.pt" ]; then
    $PY "$HERE/train.py" --work "$WORK" --tok "$WORK/tokenizer"
fi
$PY "$HERE/export.py" --ckpt "$WORK/run/final.pt" --tok "$WORK/tokenizer" --out "$OUT"
$PY "$HERE/make_card.py" --model "$OUT" --work "$WORK"
$PY "$HERE/make_builtin_fixture.py" --model "$OUT" --out "$ROOT/tests/fixtures/builtin"
$PY "$HERE/head_scores.py" --model "$OUT"
