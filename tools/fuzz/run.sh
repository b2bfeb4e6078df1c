#!/usr/bin/env bash
# Builds the libFuzzer targets with clang-14 (ASan + UBSan) and runs each one in turn.
#
#   tools/fuzz/run.sh [SECONDS_PER_TARGET]          (default 60)
#
# Environment:
#   HEADSCOPE_FUZZ_BUILD   build folder (default: build-fuzz at the repository root); one configured
#                          with -DHEADSCOPE_FUZZ=ON (./test.sh's build-asan) is used as it is
#   HEADSCOPE_FUZZ_TARGETS space-separated subset of: safetensors config tokenizer_files tokenize export
#                          tokenizer_json llama2c_tokenizer edits scan_rows scan_output shard_index
#                          llama2c_checkpoint sae_config unit_dashboard graph_json
#   HEADSCOPE_FUZZ_JOBS    build parallelism, and how many targets run at once (default 2)
#
# Each target starts from its committed seeds (tools/fuzz/corpus/<target>) plus what earlier runs
# found (<build>/corpus/<target>; new inputs go there, never into the repository). A crash, a
# sanitizer report, a leak, a timeout (> 10 s for one input) or an input using more than 2 GB is a
# finding: the reproducer is kept in <build>/artifacts/ and the script exits non-zero. The last
# line per target gives executions and coverage (cov: edges, ft: features) as libFuzzer counts them.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
SECONDS_PER_TARGET=${1:-60}
BUILD=${HEADSCOPE_FUZZ_BUILD:-$ROOT/build-fuzz}
TARGETS=(${HEADSCOPE_FUZZ_TARGETS:-safetensors config tokenizer_files tokenize export tokenizer_json llama2c_tokenizer edits scan_rows scan_output shard_index llama2c_checkpoint sae_config unit_dashboard graph_json})
JOBS=${HEADSCOPE_FUZZ_JOBS:-2}

if ! command -v clang++-14 >/dev/null; then
  echo "fuzz: clang++-14 is missing; tools/dev/deps.sh installs it" >&2
  exit 1
fi
# A folder configured with -DHEADSCOPE_FUZZ=ON (./test.sh's sanitized stage, build-asan/) is used as
# it is; any other gets a build of the core and the targets alone, configured here.
if ! grep -qs '^HEADSCOPE_FUZZ:BOOL=ON' "$BUILD/CMakeCache.txt"; then
  tools/dev/configure.sh . "$BUILD" -DCMAKE_CXX_COMPILER=clang++-14 -DHEADSCOPE_SANITIZE=ON -DHEADSCOPE_FUZZ=ON \
    -DHEADSCOPE_NATIVE=OFF -DHEADSCOPE_GUI=OFF -DHEADSCOPE_TESTS=OFF -DHEADSCOPE_UNITY=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1"  # Ninja when installed
fi
cmake --build "$BUILD" -j"$JOBS" --target fuzz_targets >/dev/null

declare -A DICT=([safetensors]=safetensors [config]=config [tokenizer_files]=tokenizer [tokenize]=tokenizer [tokenizer_json]=tokenizer
                [scan_rows]=scan [scan_output]=scan [shard_index]=shard_index [sae_config]=sae_config
                [graph_json]=graph)
# Thread start-up in the OpenMP runtime is noise for the fuzzer; one thread runs the same code.
export OMP_NUM_THREADS=1
# Leak checking stays on; UBSan reports abort with a stack.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$BUILD/artifacts"
# One target: its log in <build>/<target>.log, its summary in <build>/<target>.result.
fuzz_one() {
  local t=$1 corpus="$BUILD/corpus/$1" log="$BUILD/$1.log" result="$BUILD/$1.result"
  mkdir -p "$corpus"
  local args=(-max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -max_len=8192
              -print_final_stats=1 -artifact_prefix="$BUILD/artifacts/$t-")
  [[ -n ${DICT[$t]:-} ]] && args+=(-dict="tools/fuzz/dict/${DICT[$t]}.dict")
  if "$BUILD/fuzz_$t" "${args[@]}" "$corpus" "tools/fuzz/corpus/$t" >"$log" 2>&1; then
    # "#12345  DONE   cov: 1234 ft: 5678 corp: ..." and the final stats' execution count.
    local done_line
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
    echo "fuzz $t: ok, ${SECONDS_PER_TARGET}s: ${done_line:-$(tail -1 "$log")}" >"$result"
  else
    { echo "fuzz $t: FINDING (log: $log; reproducer in $BUILD/artifacts/)"
      grep -E 'ERROR|SUMMARY|check failed|runtime error|Test unit written' "$log" | head -20 || true
    } >"$result"
  fi
}
# Each target is one thread (see OMP_NUM_THREADS above), so JOBS of them run side by side, each
# for its full time; the summaries print in the order of TARGETS.
for t in "${TARGETS[@]}"; do
  rm -f "$BUILD/$t.result"
  while (($(jobs -rp | wc -l) >= JOBS)); do wait -n || true; done
  fuzz_one "$t" &
done
wait
status=0
for t in "${TARGETS[@]}"; do
  if grep -q "^fuzz $t: ok," "$BUILD/$t.result" 2>/dev/null; then
    cat "$BUILD/$t.result"
  else
    status=1
    cat "$BUILD/$t.result" >&2 2>/dev/null || echo "fuzz $t: did not finish (log: $BUILD/$t.log)" >&2
  fi
done
exit $status
