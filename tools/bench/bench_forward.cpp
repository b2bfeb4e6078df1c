// Forward-pass benchmarks on a GPT-2-small-shaped model (written by make_gpt2_small.py).
//   HEADSCOPE_BENCH_MODEL=/tmp/gpt2-small build-bench/tools/bench/bench_forward
// Arguments of each benchmark: tokens, threads.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdlib>
#include <iostream>

#include "core/model/model.h"

namespace {

std::shared_ptr<const hs::Model> model() {
  static std::shared_ptr<const hs::Model> m = [] {
    const char* dir = std::getenv("HEADSCOPE_BENCH_MODEL");
    if (!dir) {
      std::cerr << "set HEADSCOPE_BENCH_MODEL to a GPT-2-small-shaped folder (tools/bench/make_gpt2_small.py)\n";
      std::exit(2);
    }
    return hs::Model::load(dir);
  }();
  return m;
}

std::vector<int32_t> tokens(int n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i * 7919 + 13) % 50257;
  return t;
}

void run(benchmark::State& state, bool logits_only) {
  const auto m = model();
  const auto ids = tokens(static_cast<int>(state.range(0)));
  const int threads = static_cast<int>(state.range(1));
  hs::RunOptions o;
  o.threads = threads;
  o.logits_only = logits_only;
  for (auto _ : state) {
    auto cache = m->run(ids, o);
    benchmark::DoNotOptimize(cache->logits.row_data(0));
  }
}

void BM_ForwardFullCache(benchmark::State& s) { run(s, false); }
void BM_ForwardLogitsOnly(benchmark::State& s) { run(s, true); }

void BM_OpenModel(benchmark::State& state) {
  const char* dir = std::getenv("HEADSCOPE_BENCH_MODEL");
  for (auto _ : state) benchmark::DoNotOptimize(hs::Model::load(dir).get());
}

}  // namespace

BENCHMARK(BM_ForwardFullCache)->ArgsProduct({{20, 128, 1024}, {1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ForwardLogitsOnly)->ArgsProduct({{20, 128, 1024}, {1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_OpenModel)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
