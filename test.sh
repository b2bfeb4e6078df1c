#!/usr/bin/env bash
# Installs what is missing, builds HeadScope and runs every test headless.
set -euo pipefail
cd "$(dirname "$0")"
tools/dev/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
export QT_QPA_PLATFORM=offscreen
ctest --test-dir build --output-on-failure -j"$(nproc)"
