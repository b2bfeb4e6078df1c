// One row of the benchmark table, in its own process, so each row's peak memory is its own:
//
//   hs_bench_row --model DIR --tokens N --threads T --mode cache|logits|views --warmup W --runs R [--max-seconds S]
//                [--store scores,results]
//   hs_bench_row --model DIR --mode open --runs R [--cold]
//   hs_bench_row --model DIR --mode patch --tokens N --threads T --what resid_pre|attn_out|mlp_out|z
//                [--answer ID --wrong ID]
//   hs_bench_row --model DIR --mode peak --tokens N --threads T   (the cores' multiply-add peak and
//                the multiply-adds of one pass: the compute floor the 20-token row is held to)
//   hs_bench_row --model DIR --mode grad --text TEXT --threads T [--answer ID --wrong ID]
//   hs_bench_row --model DIR --mode atp --tokens N --threads T --what resid_pre,attn_out,mlp_out,z
//                [--answer ID --wrong ID] [--exact-warmup W --exact-runs R]
//
// Prints one JSON object with the fields of torch_bench.py (median_ms, min_ms, runs, peak_rss_mb)
// so tools/bench/suite.py reads both sides the same way.
//
// - `cache`: hs::Model::run with default hs::RunOptions, i.e. the ActivationCache the GUI keeps
//   (every view available; keys not stored are derived on request, see core/model/cache.h).
// - `logits`: RunOptions::logits_only.
// - `--store scores,results` (cache and views): RunOptions::store_scores / store_results, the
//   attention scores and per-head results kept in the cache instead of derived on request: every
//   view's data held at once, the memory a long prompt needs at most.
// - `views`: `cache`, then what the window computes from it for its views at the last position,
//   layer 0 and head 0 (head thumbnails and next tokens, the position's decomposition and direct
//   logit attribution, the layer's concat-vs-sum, the logit lens grid, the detector scores), all
//   held at once with the cache: the time and memory of a prompt with every view on screen. The
//   QK / OV spectra and the patching sweep are computed on demand and are not in it.
// - `patch`: an activation-patching sweep from prompts, as `headscope-cli patch` does it: the
//   clean and the corrupted run (the clean ids with position 1 changed to the next id, as
//   torch_bench.py --mode patch does), then hs::patching_sweep of --what; "sweep_runs" times the
//   sweep alone. Every patched cell is computed (SweepControl::skip_unchanged off), so the count
//   of patched runs is that of TransformerLens's loop.
// - `grad`: the gradient of logit(answer) - logit(wrong) at the last position at every hook, from
//   text: hs::run_text (tokenize, BOS first, the full cache and RunOptions::store_mlp_pre, what
//   the backward pass reads) then hs::backward keeping every key
//   (GradOptions::keep empty), as `headscope-cli grad` does. Each timed step is a pair, in
//   alternating order: one forward pass from the same text with the full cache (the yardstick of
//   issue 23's "at most 2.5x a forward pass") and one gradient; "forward_*" and the main fields
//   are the two, "ratio_median" the median of the pairs' ratios (robust to a machine whose speed
//   drifts). "token_ids" are the ids run, for the PyTorch side.
// - `atp`: attribution patching of every site in --what together, as issue 23 times it: the clean
//   and the corrupted run (patch's prompts), one backward pass on the corrupted run keeping what
//   the sites need (hs::atp_gradients), then each site's estimate (hs::attribution_patching);
//   and, in the same process, the exact sweeps of the same sites from the same two prompts
//   (hs::patching_sweep as `headscope-cli patch` runs it, unchanged cells not recomputed),
//   --exact-warmup / --exact-runs times. "max_abs_diff" is the largest |estimate - exact| over
//   the sites' cells (AtP is an estimate; the figure says the two computed the same nodes).
// - `open`: hs::Model::load of the folder (memory-mapped safetensors, weights checked, tokenizer
//   read). With --cold, the weight files' pages (model.safetensors or every shard) are evicted
//   from the page cache before each load (posix_fadvise DONTNEED: needs no root and touches no
//   other file); "resident_before_pct" says how much of them was still cached when each load
//   started, so a cold number that was not really cold shows itself.
//
// --max-seconds: once the passes have taken this long, no further pass starts (at least one timed
// pass always runs; "stopped_early" says so): keeps a row bounded on a loaded machine.
//
// Timing brackets the call only; the previous run's cache is freed outside the timed region, as
// torch_bench.py does with `del out`. peak_rss_mb is getrusage's ru_maxrss (whole process: mapped
// weight pages that were touched count, as torch's own copy of the weights counts on its side);
// run_peak_rss_mb is the peak after the model was loaded, reset through /proc/self/clear_refs.
//
// Profiling only the timed passes: with HEADSCOPE_PERF_CTL and HEADSCOPE_PERF_ACK naming the
// fifos of `perf record --control=fifo:CTL,ACK -D -1`, sampling is enabled around the timed
// passes (not the load, not the warm-up). suite.py uses this for its profile section.
#include <fcntl.h>
#include <omp.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/analysis/attribution_patching.h"
#include "core/analysis/head_detectors.h"
#include "core/analysis/logit_lens.h"
#include "core/analysis/patching.h"
#include "core/analysis/view_data.h"
#include "core/model/backward.h"
#include "core/model/metric.h"
#include "core/model/model.h"
#include "core/model/pack_cache.h"
#include "core/session/session.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string model;
  std::string mode = "cache";
  std::string token_ids;
  std::string text;
  std::string what = "resid_pre";
  int answer = 11, wrong = 13;
  int tokens = 20;
  int threads = 1;
  int warmup = 3;
  int runs = 10;
  int exact_warmup = 1;
  int exact_runs = 3;
  double max_seconds = 0;
  bool cold = false;
  bool store_scores = false, store_results = false;
};

[[noreturn]] void usage(const char* why) {
  std::cerr << "hs_bench_row: " << why << "\n"
            << "usage: hs_bench_row --model DIR [--mode cache|logits|views|patch|grad|atp|open|peak]\n"
            << "                    [--tokens N | --token-ids 1,2,3 | --text TEXT]\n"
            << "                    [--threads T] [--warmup W] [--runs R] [--max-seconds S] [--cold]\n"
            << "                    [--what resid_pre|attn_out|mlp_out|z[,...]] [--answer ID] [--wrong ID]\n"
            << "                    [--exact-warmup W] [--exact-runs R] [--store scores,results]\n";
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + k).c_str());
      return argv[++i];
    };
    auto number = [&]() {
      const std::string v = value();
      try {
        return std::stoi(v);
      } catch (const std::exception&) {
        usage((k + " needs a number, got \"" + v + "\"").c_str());
      }
    };
    if (k == "--model") a.model = value();
    else if (k == "--mode") a.mode = value();
    else if (k == "--tokens") a.tokens = number();
    else if (k == "--token-ids") a.token_ids = value();
    else if (k == "--text") a.text = value();
    else if (k == "--threads") a.threads = number();
    else if (k == "--warmup") a.warmup = number();
    else if (k == "--runs") a.runs = number();
    else if (k == "--exact-warmup") a.exact_warmup = number();
    else if (k == "--exact-runs") a.exact_runs = number();
    else if (k == "--max-seconds") a.max_seconds = number();
    else if (k == "--cold") a.cold = true;
    else if (k == "--store") {
      std::stringstream list(value());
      for (std::string item; std::getline(list, item, ',');) {
        if (item == "scores") a.store_scores = true;
        else if (item == "results") a.store_results = true;
        else if (!item.empty()) usage(("--store takes scores and results, got \"" + item + "\"").c_str());
      }
    }
    else if (k == "--what") a.what = value();
    else if (k == "--answer") a.answer = number();
    else if (k == "--wrong") a.wrong = number();
    else if (k == "--help" || k == "-h") usage("help");
    else usage(("unknown argument " + k).c_str());
  }
  if (a.model.empty()) usage("--model is required");
  if (a.mode != "cache" && a.mode != "logits" && a.mode != "views" && a.mode != "open" && a.mode != "patch" &&
      a.mode != "peak" && a.mode != "grad" && a.mode != "atp")
    usage("--mode is cache, logits, views, patch, grad, atp, open or peak");
  if (a.mode == "grad" && a.text.empty()) usage("--mode grad needs --text (the gradient is timed from text)");
  if (a.threads < 1 || a.runs < 1 || a.warmup < 0 || a.tokens < 1 || a.exact_runs < 1 || a.exact_warmup < 0)
    usage("counts must be positive");
  return a;
}

// CPU time of the whole process (all threads), in ms. On a loaded machine a 1-thread pass's CPU
// time is close to what its wall time would be on a quiet one (with 2 threads it also counts
// OpenMP's spin-waiting, so it is not a speed measure there).
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // Linux: KiB
}

// VmHWM / VmRSS from /proc/self/status, in MB (0 when unavailable).
double status_mb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::atof(line.c_str() + key.size()) / 1024.0;
  return 0.0;
}

// Resets VmHWM to the current RSS (Linux >= 4.0); false when not allowed.
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  if (!out) return false;
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) ids.push_back(static_cast<int32_t>(std::stol(item)));
  return ids;
}

// Deterministic ids spread over the vocabulary when --token-ids is not given (suite.py passes
// torch_bench.py's ids to both sides, so this only serves manual runs).
std::vector<int32_t> default_ids(int n, int vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919LL + 13) % vocab);
  return ids;
}

// Fraction of `path`'s pages in the page cache, in percent (-1 when it cannot be measured).
double resident_pct(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size == 0) {
    ::close(fd);
    return -1;
  }
  const size_t size = static_cast<size_t>(st.st_size), page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) return -1;
  std::vector<unsigned char> v((size + page - 1) / page);
  double pct = -1;
  if (::mincore(m, size, v.data()) == 0) {
    size_t in = 0;
    for (unsigned char c : v) in += c & 1;
    pct = 100.0 * static_cast<double>(in) / static_cast<double>(v.size());
  }
  ::munmap(m, size);
  return pct;
}

void evict(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Switches a `perf record --control` session on or off; no-op without the environment.
void perf_control(const char* command) {
  const char* ctl = std::getenv("HEADSCOPE_PERF_CTL");
  const char* ack = std::getenv("HEADSCOPE_PERF_ACK");
  if (!ctl || !ack) return;
  std::ofstream out(ctl);
  out << command << "\n";
  out.flush();
  out.close();
  std::ifstream in(ack);  // perf answers "ack" once the command took effect
  std::string reply;
  std::getline(in, reply);
}

struct Stats {
  double median = 0, min = 0;
};

Stats stats(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.min = v.front();
  return s;
}

std::string json_list(const std::vector<double>& v) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(3);
  o << "[";
  for (size_t i = 0; i < v.size(); ++i) o << (i ? ", " : "") << v[i];
  o << "]";
  return o.str();
}

// The passes of a process: --warmup untimed, then --runs timed. Past --max-seconds no new pass
// starts once one was timed (stopped_early says so); out of time while warming up, it goes
// straight to one timed pass. Switches perf on at the first timed pass.
class Passes {
 public:
  explicit Passes(const Args& a) : a_(a), start_(Clock::now()) {}
  // Whether pass i runs; `timed_any`: a timed pass has run. May move i to the first timed pass.
  bool run(int& i, bool timed_any) {
    if (i >= a_.warmup + a_.runs) return false;
    if (a_.max_seconds > 0 && ms_since(start_) > a_.max_seconds * 1e3) {
      if (timed_any) {
        stopped_early = true;
        return false;
      }
      if (i < a_.warmup) i = a_.warmup;
    }
    if (i == a_.warmup) perf_control("enable");
    return true;
  }
  bool stopped_early = false;

 private:
  const Args& a_;
  Clock::time_point start_;
};

// The folder's weight files: model.safetensors, or the shards of a sharded checkpoint
// (model-*-of-*.safetensors, which model.safetensors.index.json names). Empty when there are none
// (hs::Model::load then says what is missing).
std::vector<std::filesystem::path> weight_files(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(dir / "model.safetensors", ec)) return {dir / "model.safetensors"};
  std::vector<std::filesystem::path> out;
  const std::string ext = ".safetensors";
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("model-", 0) == 0 && name.size() > ext.size() &&
        name.compare(name.size() - ext.size(), ext.size(), ext) == 0)
      out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

int run_open(const Args& a) {
  const std::vector<std::filesystem::path> files = weight_files(a.model);
  std::vector<double> sizes;
  double total = 0;
  for (const auto& f : files) {
    std::error_code ec;
    sizes.push_back(static_cast<double>(std::filesystem::file_size(f, ec)));
    if (ec) sizes.back() = 0;
    total += sizes.back();
  }
  // The share of the weight files in the page cache, by bytes.
  auto resident = [&] {
    double in = 0;
    for (size_t i = 0; i < files.size(); ++i) in += std::max(0.0, resident_pct(files[i])) * sizes[i];
    return total > 0 ? in / total : -1.0;
  };
  std::vector<double> times, resident_before, first_runs;
  int cached = 0;
  for (int i = 0; i < a.warmup + a.runs; ++i) {
    if (a.cold)
      for (const auto& f : files) evict(f);
    const double before = resident();
    if (i >= a.warmup) perf_control("enable");
    const auto t0 = Clock::now();
    auto m = hs::Model::load(a.model);
    const double dt = ms_since(t0);
    if (i >= a.warmup) perf_control("disable");
    // What a person waits for after the open: the first run of a short prompt, which reads every
    // weight (for the first time, when the packed copies were mapped from the cache on disk).
    const auto t1 = Clock::now();
    m->run(default_ids(a.tokens, m->config().d_vocab), hs::RunOptions{});
    const double first_run = ms_since(t1);
    if (i >= a.warmup) cached += m->weights()->packed_from_cache();
    m.reset();  // unmap before the next eviction
    // An entry of the packed-matrix cache written after this open is on disk before the next.
    hs::PackCache::wait_for_writes();
    if (i >= a.warmup) {
      times.push_back(dt);
      resident_before.push_back(before);
      first_runs.push_back(first_run);
    }
  }
  const Stats s = stats(times), f = stats(first_runs);
  std::printf(
      "{\"median_ms\": %.3f, \"min_ms\": %.3f, \"runs\": %s, \"first_run_median_ms\": %.3f, \"first_run_tokens\": %d, "
      "\"from_pack_cache\": %d, \"peak_rss_mb\": %.1f, \"mode\": \"open\", "
      "\"cold\": %s, \"resident_before_pct\": %s, \"file_mb\": %.1f}\n",
      s.median, s.min, json_list(times).c_str(), f.median, a.tokens, cached, peak_rss_mb(), a.cold ? "true" : "false",
      json_list(resident_before).c_str(), total / (1024.0 * 1024.0));
  return 0;
}

// The prompt of a run: --token-ids, or --tokens ids of the default sequence.
std::vector<int32_t> bench_ids(const Args& a, const hs::Model& model) {
  return a.token_ids.empty() ? default_ids(a.tokens, model.config().d_vocab) : parse_ids(a.token_ids);
}

// The patching modes' corrupted prompt: the clean one with its second token changed.
std::vector<int32_t> corrupted(std::vector<int32_t> ids, const hs::Model& model) {
  if (ids.size() > 1) ids[1] = (ids[1] + 1) % model.config().d_vocab;
  return ids;
}

int run_forward(const Args& a) {
  // Threads: exactly --threads for every run (RunOptions::threads; 0 would let the core choose
  // by size). suite.py sets OMP_NUM_THREADS as well, for anything else OpenMP starts.
  omp_set_num_threads(a.threads);
  const auto t_load = Clock::now();
  const auto model = hs::Model::load(a.model);
  const double load_ms = ms_since(t_load);
  const std::vector<int32_t> ids = bench_ids(a, *model);
  hs::RunOptions options;
  options.logits_only = a.mode == "logits";
  options.store_scores = a.store_scores;
  options.store_results = a.store_results;
  options.threads = a.threads;

  const double rss_loaded = status_mb("VmRSS");
  const bool reset_ok = reset_peak_rss();
  std::vector<double> times, cpu_times;
  size_t cache_bytes = 0;
  float checksum = 0;
  Passes passes(a);
  for (int i = 0; passes.run(i, !times.empty()); ++i) {
    const double c0 = process_cpu_ms();
    const auto t0 = Clock::now();
    std::shared_ptr<hs::ActivationCache> cache = model->run(ids, options);
    if (a.mode == "views") {
      const int last = cache->n_pos() - 1;
      const hs::RunOverview overview = hs::overview_of_run(*cache, 10);
      const hs::PositionAnalysis position = hs::analyze_position(*cache, last, std::nullopt, 10);
      const hs::LayerAnalysis layer = hs::analyze_layer(*cache, 0);
      const hs::LogitLensSummary lens = hs::logit_lens_summary(*cache, std::nullopt);
      const hs::PromptHeadScores scores = hs::score_heads_on_prompt(*cache);
      checksum += static_cast<float>(overview.thumbnails.size() + lens.n_streams) + position.dla.logit;
      (void)layer;
      (void)scores;
    }
    const double dt = ms_since(t0);
    const double cpu = process_cpu_ms() - c0;
    checksum += cache->logits(cache->n_pos() - 1, 0);  // keeps the result observable
    cache_bytes = cache->stored_bytes();
    cache.reset();  // freed outside the timed region, like `del out` in torch_bench.py
    if (i >= a.warmup) {
      times.push_back(dt);
      cpu_times.push_back(cpu);
    }
  }
  perf_control("disable");
  const Stats s = stats(times), cpu_s = stats(cpu_times);
  char run_peak[32] = "null";
  if (reset_ok) std::snprintf(run_peak, sizeof run_peak, "%.1f", status_mb("VmHWM"));
  std::printf(
      "{\"median_ms\": %.3f, \"min_ms\": %.3f, \"runs\": %s, \"peak_rss_mb\": %.1f, \"mode\": \"%s\", "
      "\"cpu_median_ms\": %.3f, \"cpu_runs\": %s, \"tokens\": %zu, \"threads\": %d, \"load_ms\": %.1f, \"rss_after_load_mb\": %.1f, "
      "\"run_peak_rss_mb\": %s, \"cache_mb\": %.1f, \"stopped_early\": %s, \"store_scores\": %s, "
      "\"store_results\": %s, \"checksum\": %g}\n",
      s.median, s.min, json_list(times).c_str(), peak_rss_mb(), a.mode.c_str(), cpu_s.median,
      json_list(cpu_times).c_str(), ids.size(), a.threads, load_ms,
      rss_loaded, run_peak,
      static_cast<double>(cache_bytes) / (1024.0 * 1024.0), passes.stopped_early ? "true" : "false",
      a.store_scores ? "true" : "false", a.store_results ? "true" : "false", static_cast<double>(checksum));
  return 0;
}

int run_patch(const Args& a) {
  omp_set_num_threads(a.threads);
  const auto model = hs::Model::load(a.model);
  const std::vector<int32_t> clean = bench_ids(a, *model);
  const std::vector<int32_t> corrupt = corrupted(clean, *model);
  const hs::HookPoint what = hs::parse_hook_point(a.what);
  hs::RunOptions options;
  options.threads = a.threads;
  hs::SweepControl control;
  control.threads = a.threads;
  control.skip_unchanged = false;
  const bool reset_ok = reset_peak_rss();
  std::vector<double> times, sweep_times, cpu_times;
  int cells = 0;
  float checksum = 0;
  Passes passes(a);
  for (int i = 0; passes.run(i, !times.empty()); ++i) {
    const double c0 = process_cpu_ms();
    const auto t0 = Clock::now();
    const auto k = model->run(clean, options);
    const auto c = model->run(corrupt, options);
    const auto t1 = Clock::now();
    const hs::PatchingResult r = hs::patching_sweep(*k, *c, a.answer, a.wrong, what, control);
    const double dt = ms_since(t0), sweep = ms_since(t1);
    const double cpu = process_cpu_ms() - c0;
    checksum += r.raw.sum();
    cells = static_cast<int>(r.raw.size());
    if (i >= a.warmup) {
      times.push_back(dt);
      sweep_times.push_back(sweep);
      cpu_times.push_back(cpu);
    }
  }
  perf_control("disable");
  const Stats s = stats(times), sw = stats(sweep_times), cpu_s = stats(cpu_times);
  char run_peak[32] = "null";
  if (reset_ok) std::snprintf(run_peak, sizeof run_peak, "%.1f", status_mb("VmHWM"));
  std::printf(
      "{\"median_ms\": %.3f, \"min_ms\": %.3f, \"runs\": %s, \"sweep_median_ms\": %.3f, \"sweep_runs\": %s, "
      "\"cpu_median_ms\": %.3f, \"cpu_runs\": %s, \"peak_rss_mb\": %.1f, \"run_peak_rss_mb\": %s, \"mode\": \"patch\", "
      "\"what\": \"%s\", \"patched_runs\": %d, \"tokens\": %zu, \"threads\": %d, \"stopped_early\": %s, "
      "\"checksum\": %g}\n",
      s.median, s.min, json_list(times).c_str(), sw.median, json_list(sweep_times).c_str(), cpu_s.median,
      json_list(cpu_times).c_str(), peak_rss_mb(), run_peak, a.what.c_str(), cells, clean.size(), a.threads,
      passes.stopped_early ? "true" : "false", static_cast<double>(checksum));
  return 0;
}


int run_grad(const Args& a) {
  omp_set_num_threads(a.threads);
  const std::shared_ptr<const hs::Model> model = hs::Model::load(a.model);
  hs::TextRunOptions run_options;  // the yardstick: a plain run with the full cache
  run_options.run.threads = a.threads;
  hs::TextRunOptions grad_run = run_options;  // the gradient's run keeps what backward reads
  grad_run.run.store_mlp_pre = true;
  hs::GradOptions grad_options;
  grad_options.threads = a.threads;
  const hs::Metric metric = hs::logit_diff_metric(a.answer, a.wrong);
  const bool reset_ok = reset_peak_rss();
  std::vector<double> forward_times, forward_cpu, grad_times, grad_cpu, backward_times, ratios;
  std::vector<int32_t> ids;
  size_t n_keys = 0, grad_floats = 0;
  double metric_value = 0, checksum = 0;
  Passes passes(a);
  for (int i = 0; passes.run(i, !grad_times.empty()); ++i) {
    double forward_ms = 0, forward_cpu_ms = 0, grad_ms = 0, grad_cpu_ms = 0, backward_ms = 0;
    // Alternating which goes first, so neither always follows the other's cache misses.
    for (int half = 0; half < 2; ++half) {
      const bool gradient = (half == 0) == (i % 2 == 0);
      const double c0 = process_cpu_ms();
      const auto t0 = Clock::now();
      hs::TextRun r = hs::run_text(model, a.text, gradient ? grad_run : run_options);
      if (!gradient) {
        forward_ms = ms_since(t0);
        forward_cpu_ms = process_cpu_ms() - c0;
        checksum += r.cache->logits(r.cache->n_pos() - 1, 0);
        continue;
      }
      const auto t1 = Clock::now();
      const hs::GradientCache g = hs::backward(*r.cache, metric, grad_options);
      grad_ms = ms_since(t0);
      backward_ms = ms_since(t1);
      grad_cpu_ms = process_cpu_ms() - c0;
      metric_value = g.metric_value;
      ids = r.tokens;
      if (n_keys == 0) {  // outside the timed region: what the pass produced, for the table
        const std::vector<std::string> keys = g.keys();
        n_keys = keys.size();
        for (const std::string& key : keys) grad_floats += g.get(key).data.size();
      }
      checksum += g.rows(hs::HookPoint::ResidPre, 0)(0, 0);
    }
    if (i >= a.warmup) {
      forward_times.push_back(forward_ms);
      forward_cpu.push_back(forward_cpu_ms);
      grad_times.push_back(grad_ms);
      grad_cpu.push_back(grad_cpu_ms);
      backward_times.push_back(backward_ms);
      ratios.push_back(grad_ms / forward_ms);
    }
  }
  perf_control("disable");
  const Stats g = stats(grad_times), f = stats(forward_times), b = stats(backward_times), r = stats(ratios);
  const Stats gc = stats(grad_cpu), fc = stats(forward_cpu);
  char run_peak[32] = "null";
  if (reset_ok) std::snprintf(run_peak, sizeof run_peak, "%.1f", status_mb("VmHWM"));
  std::ostringstream id_list;
  for (size_t i = 0; i < ids.size(); ++i) id_list << (i ? "," : "") << ids[i];
  std::printf(
      "{\"median_ms\": %.3f, \"min_ms\": %.3f, \"runs\": %s, \"cpu_median_ms\": %.3f, \"cpu_runs\": %s, "
      "\"backward_median_ms\": %.3f, \"backward_runs\": %s, \"forward_median_ms\": %.3f, \"forward_min_ms\": %.3f, "
      "\"forward_runs\": %s, \"forward_cpu_median_ms\": %.3f, \"ratio_median\": %.3f, \"ratio_runs\": %s, "
      "\"peak_rss_mb\": %.1f, \"run_peak_rss_mb\": %s, \"mode\": \"grad\", \"tokens\": %zu, \"token_ids\": \"%s\", "
      "\"threads\": %d, \"grad_keys\": %zu, \"grad_floats\": %zu, \"metric\": %.9g, \"stopped_early\": %s, "
      "\"checksum\": %g}\n",
      g.median, g.min, json_list(grad_times).c_str(), gc.median, json_list(grad_cpu).c_str(), b.median,
      json_list(backward_times).c_str(), f.median, f.min, json_list(forward_times).c_str(), fc.median, r.median,
      json_list(ratios).c_str(), peak_rss_mb(), run_peak, ids.size(), id_list.str().c_str(), a.threads, n_keys,
      grad_floats, metric_value, passes.stopped_early ? "true" : "false", checksum);
  return 0;
}


int run_atp(const Args& a) {
  omp_set_num_threads(a.threads);
  const auto model = hs::Model::load(a.model);
  const std::vector<int32_t> clean = bench_ids(a, *model);
  const std::vector<int32_t> corrupt = corrupted(clean, *model);
  std::vector<hs::AtpSite> sites;
  std::vector<hs::HookPoint> exact_sites;
  {
    std::stringstream ss(a.what);
    std::string name;
    while (std::getline(ss, name, ',')) {
      const std::optional<hs::AtpSite> site = hs::parse_atp_site(name);
      if (!site || !hs::exact_sweep_site(*site)) usage(("--what " + name + ": resid_pre, attn_out, mlp_out or z").c_str());
      sites.push_back(*site);
      exact_sites.push_back(*hs::exact_sweep_site(*site));
    }
  }
  hs::RunOptions options;
  options.threads = a.threads;
  hs::RunOptions grad_options = options;  // the corrupted run keeps what backward reads
  grad_options.store_mlp_pre = true;
  hs::SweepControl control;
  control.threads = a.threads;
  const bool reset_ok = reset_peak_rss();
  std::vector<double> atp_times, atp_cpu, backward_times, estimate_times, exact_times, exact_cpu;
  std::vector<hs::AtpResult> estimates;
  std::vector<hs::PatchingResult> exact;
  int nodes = 0;
  double checksum = 0;
  for (int i = 0; i < a.warmup + a.runs; ++i) {
    if (i == a.warmup) perf_control("enable");
    const double c0 = process_cpu_ms();
    const auto t0 = Clock::now();
    const auto k = model->run(clean, options);
    const auto c = model->run(corrupt, grad_options);
    const auto t1 = Clock::now();
    const hs::GradientCache g = hs::atp_gradients(*c, a.answer, a.wrong, sites, hs::PatchMethod::AtP, a.threads);
    const auto t2 = Clock::now();
    estimates.clear();
    for (const hs::AtpSite site : sites) estimates.push_back(hs::attribution_patching(*k, *c, g, site));
    const double dt = ms_since(t0), cpu = process_cpu_ms() - c0;
    nodes = 0;
    for (const hs::AtpResult& r : estimates) {
      nodes += static_cast<int>(r.raw.size());
      checksum += r.raw.sum();
    }
    if (i >= a.warmup) {
      atp_times.push_back(dt);
      atp_cpu.push_back(cpu);
      backward_times.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
      estimate_times.push_back(ms_since(t2));
    }
  }
  perf_control("disable");
  int cells = 0, recomputed = 0;
  for (int i = 0; i < a.exact_warmup + a.exact_runs; ++i) {
    const double c0 = process_cpu_ms();
    const auto t0 = Clock::now();
    const auto k = model->run(clean, options);
    const auto c = model->run(corrupt, options);
    exact.clear();
    for (const hs::HookPoint what : exact_sites)
      exact.push_back(hs::patching_sweep(*k, *c, a.answer, a.wrong, what, control));
    const double dt = ms_since(t0), cpu = process_cpu_ms() - c0;
    cells = recomputed = 0;
    for (const hs::PatchingResult& r : exact) {
      cells += static_cast<int>(r.raw.size());
      recomputed += r.recomputed_runs;
    }
    if (i >= a.exact_warmup) {
      exact_times.push_back(dt);
      exact_cpu.push_back(cpu);
    }
  }
  // What was timed, checked: the estimate and the exact sweep of the same nodes side by side.
  double max_diff = 0, max_exact = 0;
  std::string worst;
  for (size_t s = 0; s < sites.size(); ++s) {
    if (estimates[s].raw.rows() != exact[s].raw.rows() || estimates[s].raw.cols() != exact[s].raw.cols()) {
      std::cerr << "hs_bench_row: the estimate of " << hs::to_string(sites[s]) << " is " << estimates[s].raw.rows()
                << " x " << estimates[s].raw.cols() << ", its exact sweep " << exact[s].raw.rows() << " x "
                << exact[s].raw.cols() << "\n";
      return 1;
    }
    const double d = (estimates[s].raw - exact[s].raw).cwiseAbs().maxCoeff();
    if (d > max_diff) {
      max_diff = d;
      worst = std::string(hs::to_string(sites[s]));
    }
    max_exact = std::max(max_exact, static_cast<double>(exact[s].raw.cwiseAbs().maxCoeff()));
  }
  const Stats s = stats(atp_times), sc = stats(atp_cpu), b = stats(backward_times), e = stats(estimate_times);
  const Stats x = stats(exact_times), xc = stats(exact_cpu);
  char run_peak[32] = "null";
  if (reset_ok) std::snprintf(run_peak, sizeof run_peak, "%.1f", status_mb("VmHWM"));
  std::printf(
      "{\"median_ms\": %.3f, \"min_ms\": %.3f, \"runs\": %s, \"cpu_median_ms\": %.3f, \"cpu_runs\": %s, "
      "\"backward_median_ms\": %.3f, \"backward_runs\": %s, \"estimates_median_ms\": %.3f, \"estimates_runs\": %s, "
      "\"exact_median_ms\": %.3f, \"exact_runs\": %s, \"exact_cpu_median_ms\": %.3f, \"exact_cpu_runs\": %s, "
      "\"speedup\": %.3f, \"nodes\": %d, \"exact_cells\": %d, \"exact_patched_runs\": %d, \"max_abs_diff\": %.6g, "
      "\"max_abs_exact\": %.6g, \"worst_site\": \"%s\", \"peak_rss_mb\": %.1f, \"run_peak_rss_mb\": %s, "
      "\"mode\": \"atp\", \"what\": \"%s\", \"tokens\": %zu, \"threads\": %d, \"checksum\": %g}\n",
      s.median, s.min, json_list(atp_times).c_str(), sc.median, json_list(atp_cpu).c_str(), b.median,
      json_list(backward_times).c_str(), e.median, json_list(estimate_times).c_str(), x.median,
      json_list(exact_times).c_str(), xc.median, json_list(exact_cpu).c_str(), x.median / s.median, nodes, cells,
      recomputed, max_diff, max_exact, worst.c_str(), peak_rss_mb(), run_peak, a.what.c_str(), clean.size(), a.threads,
      checksum);
  return 0;
}


// --mode peak: the compute floor. Each thread runs 12 independent chains of vector multiply-adds
// (enough to cover the FMA units' latency) for about a third of a second; the figure is the
// sustained multiply-add rate of the cores, which no product can beat. Also prints the
// multiply-adds of one forward pass of --tokens tokens through --model (every matrix product and
// the attention scores and mixing), so floor_ms = pass_gflop / gflops.
#if defined(__AVX512F__)
constexpr int kPeakLanes = 16;
#elif defined(__AVX__)
constexpr int kPeakLanes = 8;
#else
constexpr int kPeakLanes = 4;
#endif
typedef float PeakVec __attribute__((vector_size(kPeakLanes * sizeof(float))));

double peak_gflops(int threads) {
  double total = 0;
  const int64_t iterations = int64_t{1} << 23;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    // Twelve named chains, so that each lives in a register (an array of them was kept on the
    // stack, and the loop measured loads and stores instead of multiply-adds).
    const PeakVec m = PeakVec{} + 0.999999f, c = PeakVec{} + 1e-7f;
    PeakVec a0 = m, a1 = m + c, a2 = a1 + c, a3 = a2 + c, a4 = a3 + c, a5 = a4 + c, a6 = a5 + c, a7 = a6 + c,
            a8 = a7 + c, a9 = a8 + c, a10 = a9 + c, a11 = a10 + c;
    const auto t0 = Clock::now();
    for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) {
        a0 = a0 * m + c; a1 = a1 * m + c; a2 = a2 * m + c; a3 = a3 * m + c;
        a4 = a4 * m + c; a5 = a5 * m + c; a6 = a6 * m + c; a7 = a7 * m + c;
        a8 = a8 * m + c; a9 = a9 * m + c; a10 = a10 * m + c; a11 = a11 * m + c;
      }
      asm volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8),
                   "+v"(a9), "+v"(a10), "+v"(a11));
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const PeakVec sum = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
    if (sum[0] == 12345.0f) std::printf(" ");
    total += 2.0 * 12 * 4 * kPeakLanes * static_cast<double>(iterations) / seconds / 1e9;
  }
  return total;
}

int run_peak(const Args& a) {
  const auto model = hs::Model::load(a.model);
  const hs::ModelConfig& c = model->config();
  const double n = a.tokens, D = c.d_model, M = c.d_mlp, V = c.d_vocab, H = c.n_heads, dh = c.d_head;
  const double qkv = D * (H + 2.0 * c.n_key_value_heads) * dh, o = H * dh * D;
  const double mlp = (c.architecture.mlp == hs::MlpKind::Gated ? 3.0 : 2.0) * D * M;
  const double attention = 2.0 * H * dh * n * (n + 1) / 2.0;  // scores and mixing over the causal half
  const double flop = 2.0 * (c.n_layers * (n * (qkv + o + mlp) + attention) + n * D * V);
  std::vector<double> one, two;
  for (int rep = 0; rep < 3; ++rep) {
    one.push_back(peak_gflops(1));
    two.push_back(peak_gflops(std::max(1, a.threads)));
  }
  std::printf("{\"mode\": \"peak\", \"gflops_1\": %.2f, \"gflops_threads\": %.2f, \"threads\": %d, "
              "\"tokens\": %d, \"pass_gflop\": %.4f, \"floor_ms_1\": %.3f, \"floor_ms_threads\": %.3f}\n",
              *std::max_element(one.begin(), one.end()), *std::max_element(two.begin(), two.end()), a.threads, a.tokens,
              flop / 1e9, flop / 1e6 / *std::max_element(one.begin(), one.end()),
              flop / 1e6 / *std::max_element(two.begin(), two.end()));
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    if (a.mode == "patch") return run_patch(a);
    if (a.mode == "peak") return run_peak(a);
    if (a.mode == "grad") return run_grad(a);
    if (a.mode == "atp") return run_atp(a);
    return a.mode == "open" ? run_open(a) : run_forward(a);
  } catch (const std::exception& e) {
    std::cerr << "hs_bench_row: " << e.what() << "\n";
    return 1;
  }
}
