#!/bin/sh
# Train the SAE and the four transcoders shipped with the built-in model, from nothing (fixed seeds):
#   Debian packages -> corpus -> token ids (the shipped model's tokenizer) -> activations of the
#   shipped model -> 1 TopK SAE + 4 JumpReLU transcoders (SAELens v6 folders) -> SAE_CARD.md.
# Usage: tools/train/retrain_saes.sh [WORK_DIR]   (default /tmp/headscope-train; needs apt-get download,
# Debian's python3-torch and python3-numpy; about 65-75 minutes on a 2-core machine shared with compiles)
# Output: resources/models/headscope-tiny/saes/{resid_pre_2,transcoder_0..3}/ and SAE_CARD.md.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
WORK=${1:-${HEADSCOPE_TRAIN_WORK:-/tmp/headscope-train}}
PY=/usr/bin/python3
# OpenMP threads that spin while the other core is busy (compilers...) slow training 10x or more.
export OMP_WAIT_POLICY=PASSIVE

$PY "$HERE/prepare_data.py" --work "$WORK"
if [ ! -f "$WORK/run/heldout_ids.npy" ] || [ ! -f "$WORK/run/train_ids.npy" ]; then
    mkdir -p "$WORK/run"
    # the same token ids as train.py makes (tokenize_file), with the shipped model's tokenizer
    $PY -c "
import sys; sys.path.insert(0, '$HERE')
import bpe, train
tok = bpe.Tokenizer('$ROOT/resources/models/headscope-tiny')
for n in ('heldout', 'train'):
    print(n, len(train.tokenize_file(tok, '$WORK/corpus/%s.txt' % n, '$WORK/run/%s_ids.npy' % n)))
"
fi
if [ ! -f "$WORK/saes/acts/meta.json" ]; then
    $PY "$HERE/train_saes.py" collect --work "$WORK"
fi
# two units at a time (one thread each)
for pair in "sae tc0" "tc1 tc2" "tc3"; do
    for u in $pair; do
        $PY "$HERE/train_saes.py" train --work "$WORK" --unit "$u" > "$WORK/saes/train_$u.log" 2>&1 &
    done
    wait
done
for u in sae tc0 tc1 tc2 tc3; do
    tail -n 1 "$WORK/saes/train_$u.log"
    [ -f "$WORK/saes/$u.json" ] || { echo "training $u failed, see $WORK/saes/train_$u.log" >&2; exit 1; }
done
$PY "$HERE/sae_card.py" --work "$WORK"
