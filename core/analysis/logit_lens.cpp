#include "core/analysis/logit_lens.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/analysis/top_k.h"
#include "core/error.h"
#include "core/model/hooks.h"
#include "core/model/memory_guard.h"
#include "core/model/ops.h"

namespace hs {
namespace {

void check_full_cache(const ActivationCache& cache) {
  if (cache.n_layer() == 0)
    throw Error("this run kept only the logits; the logit lens reads every layer's residual stream: run again "
                "with the full cache.");
}

// Stream i's residual stream at positions first .. first+rows-1 (all from `first` when rows < 0):
// [rows, d_model].
RowMatrixXf stream_rows(const ActivationCache& cache, int stream, int first, int rows = -1) {
  const int L = cache.n_layer();
  if (rows < 0) rows = cache.n_pos() - first;
  if (stream < L) return cache.layer(stream).resid_pre.middle_rows(first, rows);
  // The final resid_post is derived the way the forward pass built it (resid_pre + attn_out +
  // mlp_out, in that order), so its lens is the run's own logits bit for bit.
  const LayerActivations& a = cache.layer(L - 1);
  RowMatrixXf r = a.resid_pre.middle_rows(first, rows);
  r += a.attn_out.middle_rows(first, rows);
  r += a.mlp_out.middle_rows(first, rows);
  return r;
}

// Rows of logits the summary computes and scans at once (see logit_lens_summary).
constexpr int kBlockRows = 16;

// out [rows, d_model] = the final norm of resid, of the architecture's kind, with its weight and
// bias (when it has one).
void final_norm(RowMatrixXf& out, const ActivationCache& cache, const RowMatrixXf& resid) {
  const Weights& w = *cache.weights();
  const ModelConfig& c = cache.config();
  norm_forward(out, nullptr, resid, w.final_norm_w(), w.final_norm_b(), c.norm_eps, c.architecture.norm);
}

// The final soft-cap, cap * tanh(x / cap), when the model has one (Gemma 2), as the forward pass
// applies it after W_U: the lens reads every stream as the model reads its last one.
void apply_final_softcap(Eigen::Ref<RowMatrixXf> logits, const ActivationCache& cache) {
  const float cap = cache.config().architecture.final_softcap;
  if (!(cap > 0.0f)) return;
  for (Eigen::Index r = 0; r < logits.rows(); ++r) softcap_forward(logits.row(r).data(), logits.cols(), cap);
}

// logits [rows, d_vocab] = final_norm(resid) @ W_U (then the final soft-cap), through the forward pass's own unembedding kernel.
void lens_logits(Eigen::Ref<RowMatrixXf> logits, const ActivationCache& cache, const RowMatrixXf& resid) {
  RowMatrixXf normalized;  // [rows, d_model]
  final_norm(normalized, cache, resid);
  unembed_forward(logits, normalized, cache.weights()->packed_unembed());
  apply_final_softcap(logits, cache);
}

// log(sum(exp(row))), shifted by the row's maximum. NaN when the row holds a NaN or an infinity.
// The exponentials go through `scratch` (an aligned buffer) so that the vectorized sum adds in
// the same order wherever the row starts in memory: a column reused from an earlier run then has
// the same bits as one computed afresh.
float log_sum_exp(const Eigen::Ref<const RowVectorXf>& row, RowVectorXf& scratch) {
  if (!row.allFinite()) return std::numeric_limits<float>::quiet_NaN();
  const float mx = row.maxCoeff();
  scratch = (row.array() - mx).exp();
  return mx + std::log(scratch.sum());
}

}  // namespace

std::string lens_stream_name(const ModelConfig& config, int stream) {
  if (stream < config.n_layers) return hook_key(HookPoint::ResidPre, stream);
  return hook_key(HookPoint::ResidPost, config.n_layers - 1);
}

std::string lens_stream_label(const ModelConfig& config, int stream) {
  if (stream < config.n_layers) return "L" + std::to_string(stream) + " pre";
  return "L" + std::to_string(config.n_layers - 1) + " post";
}

LogitLens logit_lens(const ActivationCache& cache) {
  check_full_cache(cache);
  LogitLens lens;
  lens.n_streams = cache.n_layer() + 1;
  lens.n_pos = cache.n_pos();
  lens.d_vocab = cache.config().d_vocab;
  // A large model at its full context needs gigabytes: refuse before allocating, as runs do.
  const uint64_t bytes = uint64_t{sizeof(float)} * static_cast<uint64_t>(lens.n_streams) *
                         static_cast<uint64_t>(lens.n_pos) * static_cast<uint64_t>(lens.d_vocab);
  if (const auto available = available_memory(); available && bytes > *available)
    throw Error("the logit lens of " + std::to_string(lens.n_pos) + " tokens needs about " + format_bytes(bytes) +
                " for its [n_layers + 1, pos, d_vocab] log-probabilities but only " + format_bytes(*available) +
                " is available; use fewer tokens or close other programs.");
  lens.logprobs.resize(static_cast<Eigen::Index>(lens.n_streams) * lens.n_pos, lens.d_vocab);
  RowVectorXf scratch;
  for (int i = 0; i < lens.n_streams; ++i) {
    auto block = lens.logprobs.middleRows(static_cast<Eigen::Index>(i) * lens.n_pos, lens.n_pos);
    lens_logits(block, cache, stream_rows(cache, i, 0));
    for (Eigen::Index r = 0; r < block.rows(); ++r) block.row(r).array() -= log_sum_exp(block.row(r), scratch);
  }
  return lens;
}

LogitLensSummary logit_lens_summary(const ActivationCache& cache, std::optional<int32_t> target, int top_k,
                                    const LogitLensSummary* previous) {
  check_full_cache(cache);
  const ModelConfig& c = cache.config();
  const int V = c.d_vocab, S = cache.n_pos();
  if (target && (*target < 0 || *target >= V))
    throw Error("target token " + std::to_string(*target) + " is outside the vocabulary (0.." + std::to_string(V - 1) +
                ").");
  top_k = std::clamp(top_k, 1, V);

  LogitLensSummary s;
  s.n_streams = c.n_layers + 1;
  s.n_pos = S;
  s.top_k = top_k;
  s.target = target;
  s.weights = cache.weights();
  s.tokens = cache.tokens();
  for (int i = 0; i < s.n_streams; ++i) s.stream_labels.push_back(lens_stream_label(c, i));
  const size_t cells = static_cast<size_t>(s.n_streams) * S;
  s.top_ids.assign(cells * top_k, 0);
  s.top_probs.assign(cells * top_k, 0.0f);
  s.colour_values.assign(cells, 0.0f);
  if (target) {
    s.target_probs.assign(cells, 0.0f);
    s.target_ranks.assign(cells, 0);
  }

  // Columns shared with the previous summary: the common token prefix, when everything else the
  // cells depend on is the same.
  int reused = 0;
  if (previous && previous->weights.lock() == cache.weights() && previous->target == target &&
      previous->top_k == top_k && previous->n_streams == s.n_streams) {
    const auto& old = previous->tokens;
    while (reused < S && reused < static_cast<int>(old.size()) && old[static_cast<size_t>(reused)] == s.tokens[static_cast<size_t>(reused)])
      ++reused;
    for (int i = 0; i < s.n_streams; ++i) {
      const size_t from = previous->cell(i, 0), to = s.cell(i, 0);
      std::copy_n(previous->top_ids.begin() + static_cast<long>(from * top_k), reused * top_k, s.top_ids.begin() + static_cast<long>(to * top_k));
      std::copy_n(previous->top_probs.begin() + static_cast<long>(from * top_k), reused * top_k, s.top_probs.begin() + static_cast<long>(to * top_k));
      std::copy_n(previous->colour_values.begin() + static_cast<long>(from), reused, s.colour_values.begin() + static_cast<long>(to));
      if (target) {
        std::copy_n(previous->target_probs.begin() + static_cast<long>(from), reused, s.target_probs.begin() + static_cast<long>(to));
        std::copy_n(previous->target_ranks.begin() + static_cast<long>(from), reused, s.target_ranks.begin() + static_cast<long>(to));
      }
    }
  }
  if (reused == S) return s;

  // Every stream's new rows through the final norm, taken as one list [stream * new pos, d_model]
  // in blocks of 16, so that the packed W_U streams from memory once per block rather than once
  // per stream (larger blocks were slower: docs/benchmarks.md, "Measurements behind the code").
  // Each block's rows are normalized as it comes: the whole list at a long prompt is as large as
  // a layer of the cache.
  const int N = S - reused, rows = s.n_streams * N;
  const int block = std::min(kBlockRows, rows);
  RowMatrixXf x(block, c.d_model), logits(block, V), one;  // [block rows, d_model], [block rows, d_vocab]
  for (int first = 0; first < rows; first += block) {
    const int n = std::min(block, rows - first);
    x.resize(n, c.d_model);
    for (int r = 0; r < n;) {  // the block's rows, one stream's run of them at a time
      const int stream = (first + r) / N, pos = reused + (first + r) % N;
      const int count = std::min(n - r, S - pos);
      final_norm(one, cache, stream_rows(cache, stream, pos, count));
      x.middleRows(r, count) = one;
      r += count;
    }
    unembed_forward(logits.topRows(n), x, cache.weights()->packed_unembed());
    apply_final_softcap(logits.topRows(n), cache);
    // Each row's scan (a log-sum-exp and a top-k over the vocabulary) is its own: the rows of a
    // block are shared among the threads, as the product's columns were. A row's values do not
    // depend on the thread that scans it.
#pragma omp parallel if (n > 1 && V >= 4096)
    {
      std::vector<std::pair<float, int32_t>> best;  // the row's top_k, largest first
      RowVectorXf scratch;
#pragma omp for schedule(static)
      for (int r = 0; r < n; ++r) {
        const auto row = logits.row(r);
        const float lse = log_sum_exp(row, scratch);
        const size_t cell = s.cell((first + r) / N, reused + (first + r) % N);
        top_k_entries(row, top_k, best);
        // A row with a NaN has a NaN lse, so every probability of it is NaN (drawn as masked).
        for (int k = 0; k < top_k; ++k) {
          const bool have = k < static_cast<int>(best.size());
          s.top_ids[cell * top_k + k] = have ? best[static_cast<size_t>(k)].second : 0;
          s.top_probs[cell * top_k + k] =
              have ? std::exp(best[static_cast<size_t>(k)].first - lse) : std::numeric_limits<float>::quiet_NaN();
        }
        if (target) {
          const float tv = row(*target);
          s.target_probs[cell] = std::exp(tv - lse);
          s.target_ranks[cell] = static_cast<int32_t>((row.array() > tv).count());
          s.colour_values[cell] = s.target_probs[cell];
        } else {
          s.colour_values[cell] = s.top_probs[cell * top_k];
        }
      }
    }
  }
  return s;
}

}  // namespace hs
