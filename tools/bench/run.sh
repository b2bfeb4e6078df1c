#!/usr/bin/env bash
# HeadScope's benchmark suite, one command from a fresh clone (Debian 12, root or sudo):
#
#   tools/bench/run.sh            # every row; about 15 minutes on a quiet 2-core machine
#   tools/bench/run.sh --quick    # smoke run: a few minutes, rough numbers
#   tools/bench/run.sh --sections grad,atp   # issue 23's gradients alone: their block of the page
#   tools/bench/run.sh --sections gemma2,qwen3   # issue 24's Gemma-2-2B and Qwen3-0.6B shapes alone
#   tools/bench/run.sh --sections units   # issue 25's Features keystroke and scan --units alone
#
# Installs what is missing, builds a Release build with -DHEADSCOPE_BENCH=ON in build-bench/
# (override: HEADSCOPE_BENCH_BUILD=DIR), writes the GPT-2-small-shaped random model to
# build-bench/gpt2-small once (~500 MB, not committed; override: HEADSCOPE_BENCH_MODEL=DIR) and the
# Llama-family shapes beside it (smollm-135m, qwen2.5-0.5b: tools/bench/make_llama_shapes.py) and
# issue 24's (gemma-2-2b, ~5.2 GB in three shards, and qwen3-0.6b: tools/bench/make_gemma_shapes.py),
# then runs tools/bench/suite.py: HeadScope against PyTorch row by row, model open time, the
# GUI's keystroke latency, a perf profile; prints the table and rewrites docs/benchmarks.md.
# Other arguments go to suite.py (e.g. --no-profile, --json out.json).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=$(realpath -m "${HEADSCOPE_BENCH_BUILD:-build-bench}")
MODEL=$(realpath -m "${HEADSCOPE_BENCH_MODEL:-$BUILD/gpt2-small}")
command_line="tools/bench/run.sh${*:+ $*}"
# --sections LIST (suite.py's): what is not run is not built or written either (a gradients-only
# run, --sections grad,atp, needs neither the GUI benchmark nor the Llama-family shapes).
sections=""
args=("$@")
for ((i = 0; i < ${#args[@]}; ++i)); do
  case ${args[i]} in
    --sections) sections=${args[i + 1]:-} ;;
    --sections=*) sections=${args[i]#--sections=} ;;
  esac
done
wants() { [[ -z $sections || ,$sections, == *,$1,* ]]; }

# --- packages: HeadScope's own (tools/dev/deps.sh), then the benchmark's --------------------------
tools/dev/deps.sh
BENCH_PACKAGES=(libbenchmark-dev python3-torch python3-numpy python3-threadpoolctl libopenblas0-openmp)
missing=()
for p in "${BENCH_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bench: installing ${missing[*]}" >&2
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# torch must find OpenMP OpenBLAS (the pthreads build oversubscribes 2 cores and runs 3-5x slower).
if [[ -e /usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3 ]]; then
  current=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 || true)
  if [[ $current != */openblas-openmp/* ]]; then
    echo "bench: libblas.so.3 points to $current; PyTorch will not be at its best." >&2
    echo "       Fix: sudo update-alternatives --set libblas.so.3-x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3" >&2
  fi
fi

# --- build ---------------------------------------------------------------------------------------
GUI=ON
[[ -f ui/CMakeLists.txt ]] || GUI=OFF  # a checkout without the GUI still benchmarks the engine
LAUNCHER=()
command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)  # a rebuild after a build is quick
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DHEADSCOPE_BENCH=ON -DHEADSCOPE_GUI=$GUI \
  -DHEADSCOPE_TESTS=OFF "${LAUNCHER[@]}" >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target hs_bench_row
# The GUI benchmark needs the GUI library; if it does not build, the rest still runs.
if { wants gui || wants units; } && [[ -d $BUILD/tools/bench/CMakeFiles/hs_bench_keys.dir ]]; then
  if ! cmake --build "$BUILD" -j"$(nproc)" --target hs_bench_keys; then
    echo "bench: hs_bench_keys did not build; the GUI rows are skipped" >&2
    rm -f "$BUILD/tools/bench/hs_bench_keys"
  fi
fi
# The units section's scan.
if wants units; then cmake --build "$BUILD" -j"$(nproc)" --target headscope-cli; fi
# The built-in model, where the programs look for it (when it is in resources/models yet).
cmake --build "$BUILD" --target headscope_builtin_model >/dev/null 2>&1 || true

# --- the model -----------------------------------------------------------------------------------
# Every section but families, gemma2 and qwen3 runs on it.
needs_gpt2=false
for s in rows patch grad atp units open gui profile; do wants $s && needs_gpt2=true; done
if $needs_gpt2 && [[ ! -f $MODEL/model.safetensors || ! -f $MODEL/config.json ]]; then
  echo "bench: writing the GPT-2-small-shaped model to $MODEL (~500 MB, once)" >&2
  /usr/bin/python3 tools/bench/make_gpt2_small.py "$MODEL"
fi
# The units section's 16,384-latent TopK SAE at blocks.6.hook_resid_pre beside it (~100 MB, once).
SAE=$(dirname "$MODEL")/sae16k
if wants units && [[ ! -f $SAE/cfg.json ]]; then
  echo "bench: writing the 16,384-latent benchmark SAE to $SAE (once)" >&2
  /usr/bin/python3 tools/bench/make_bench_sae.py "$SAE"
fi
# The Llama-family shapes beside it (~270 MB and ~1 GB, BF16, once).
if wants families; then
  for shape in smollm-135m qwen2.5-0.5b; do
    dir=$(dirname "$MODEL")/$shape
    if [[ ! -f $dir/model.safetensors || ! -f $dir/config.json ]]; then
      echo "bench: writing the $shape-shaped model to $dir (once)" >&2
      /usr/bin/python3 tools/bench/make_llama_shapes.py "$dir" --shape "$shape"
    fi
  done
fi

# Issue 24's shapes (~5.2 GB and ~1.2 GB, BF16, once; config.json is written last, so a folder
# that has one is complete). The Gemma-2-2B rows need about 14 GB free for PyTorch's float32 copy.
for pair in gemma2:gemma-2-2b qwen3:qwen3-0.6b; do
  section=${pair%%:*} shape=${pair#*:}
  dir=$(dirname "$MODEL")/$shape
  if wants "$section" && [[ ! -f $dir/config.json ]]; then
    echo "bench: writing the $shape-shaped model to $dir (once)" >&2
    /usr/bin/python3 tools/bench/make_gemma_shapes.py "$dir" --shape "$shape"
  fi
done

# --- run -----------------------------------------------------------------------------------------
exec /usr/bin/python3 tools/bench/suite.py --build-dir "$BUILD" --model "$MODEL" --command "$command_line" "$@"
