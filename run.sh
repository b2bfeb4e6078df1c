#!/usr/bin/env bash
# Installs what is missing, builds HeadScope (Release) and starts it on the built-in model.
# Arguments are passed to the program, e.g. ./run.sh --model ~/models/gpt2
set -euo pipefail
cd "$(dirname "$0")"
tools/dev/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target headscope headscope-cli headscope_builtin_model
exec build/app/headscope "$@"
